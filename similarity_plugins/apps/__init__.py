"""Applications built on the library (layer 4): the studies (``studies``: ``shortcut``, which
the demo runs, ``robustness``, ``unseen_cue``; ``experiments``), donor training
(``training``), the model zoo that builds models from spec strings (``zoo``) and figures (``plots``).

Nothing below this package imports it; the CLI and the public face sit on top of it.
"""
