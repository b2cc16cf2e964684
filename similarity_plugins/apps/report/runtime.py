"""The charts' runtime: Vega, Vega-Lite and vega-embed as one JavaScript bundle, inlined once in every page.

The bundle comes from ``vl-convert-python`` (the Vega project's own packaging of the three libraries), so a page
needs no network and no CDN to draw its charts. Building it takes a few seconds the first time in a process
(``vl_convert`` keeps it after that).
"""

from __future__ import annotations

__all__ = ["MissingRuntime", "vega_runtime", "runtime_versions"]

INSTALL = 'pip install "similarity-plugins[report]"'


class MissingRuntime(ImportError):
    """The page's chart runtime (the ``vl-convert-python`` package) is not installed; the message says how."""


def _vl_convert():
    try:
        import vl_convert
    except ImportError as exc:
        raise MissingRuntime(f"the HTML report needs the package vl-convert-python (the Vega runtime every page "
                             f"carries inside it), which is not installed: {INSTALL}") from exc
    return vl_convert


def vega_runtime() -> str:
    """The JavaScript that defines ``vegaEmbed``, ``vega`` and ``vegaLite`` on ``window``, with every dependency.

    Returns:
        The script's text (about 0.9 MB), safe inside a ``<script>`` element.

    Raises:
        MissingRuntime: vl-convert-python is not installed (the message names the install command).
    """
    text = _vl_convert().javascript_bundle()
    return text.replace("</script", "<\\/script")  # (the bundle has none today; a page must never close early)


def runtime_versions() -> dict[str, str]:
    """``{"vega", "vega-lite", "vega-embed"}`` versions of the inlined runtime (the page's footer names them)."""
    vlc = _vl_convert()
    return {"vega": vlc.get_vega_version(), "vega-lite": vlc.get_vegalite_versions()[-1],
            "vega-embed": vlc.get_vega_embed_version()}
