"""The charts' runtime: Vega, Vega-Lite and vega-embed as one JavaScript bundle, inlined once in every page.

The bundle comes from ``vl-convert-python`` (the Vega project's own packaging of the three libraries), so a page
needs no network and no CDN to draw its charts. Building it takes seconds, so it is built once per vl-convert
version and kept in the user's cache folder (``$XDG_CACHE_HOME/similarity-plugins``, else
``~/.cache/similarity-plugins``) with its SHA-256, checked whenever it is read: a damaged or edited copy is built
again. Where that folder cannot be written, the bundle is built in every process that writes a page.
"""

from __future__ import annotations

import hashlib
import os

_HEADER = "// similarity-plugins vega runtime sha256="


def _vl_convert():
    from ...utils.extras import require

    return require("vl_convert", "report", "the HTML report (the Vega runtime every page carries)")


def runtime_cache_path() -> str:
    """Where the runtime of the installed vl-convert version is kept: a file in the user's cache folder."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "similarity-plugins", f"vega-runtime-{_vl_convert().__version__}.js")


def _cached(path: str) -> str | None:
    """The bundle kept at ``path`` when it is there and matches its SHA-256, else None."""
    try:
        with open(path, encoding="utf-8", newline="") as fh:
            head, text = fh.readline().rstrip("\n"), fh.read()
    except (OSError, UnicodeDecodeError):
        return None
    if head != _HEADER + hashlib.sha256(text.encode("utf-8")).hexdigest():
        return None
    return text


def _keep(path: str, text: str) -> None:
    """Keep the bundle at ``path`` with its SHA-256 (whole, atomically); a folder that cannot be written is left."""
    from ...utils.io import atomic_write

    try:
        with atomic_write(path, "w", newline="", follow_links=False) as fh:
            fh.write(_HEADER + hashlib.sha256(text.encode("utf-8")).hexdigest() + "\n" + text)
    except OSError:
        pass


def vega_runtime() -> str:
    """The JavaScript that defines ``vegaEmbed``, ``vega`` and ``vegaLite`` on ``window``, with every dependency.

    Returns:
        The script's text (about 0.9 MB), safe inside a ``<script>`` element.

    Raises:
        MissingExtra: vl-convert-python is not installed (the message names the install command).
    """
    path = runtime_cache_path()
    text = _cached(path)
    if text is None:
        text = _vl_convert().javascript_bundle()
        _keep(path, text)
    return text.replace("</script", "<\\/script")  # (the bundle has none today; a page must never close early)


def runtime_versions() -> dict[str, str]:
    """``{"vega", "vega-lite", "vega-embed"}`` versions of the inlined runtime (the page's footer names them)."""
    vlc = _vl_convert()
    return {"vega": vlc.get_vega_version(), "vega-lite": vlc.get_vegalite_versions()[-1],
            "vega-embed": vlc.get_vega_embed_version()}
