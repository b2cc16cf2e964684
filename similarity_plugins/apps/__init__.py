"""Applications built on the library (layer 4): the studies (``studies``: ``shortcut``, which
the demo runs, ``robustness``, ``unseen_cue``; ``experiments``), donor training
(``training``), the model zoo that builds models from spec strings (``zoo``), figures (``plots``) and the HTML
report (``report``: one self-contained page of a comparison, a grid or a study).

Nothing below this package imports it; the CLI and the public face sit on top of it.
"""
