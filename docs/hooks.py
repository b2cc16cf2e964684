"""mkdocs hook: the site's home page is README.md itself (one text, two places).

README links its pages as ``docs/NAME.md`` and its images as ``docs/NAME.png``, which work on GitHub; on the site
the home page sits inside ``docs/``, so those prefixes are dropped. Nothing else in the text changes.
"""

from __future__ import annotations

import re
from pathlib import Path

from mkdocs.structure.files import File

_DOCS_LINK = re.compile(r"\]\(docs/")


def readme_as_home(text: str) -> str:
    """README.md's text with its ``](docs/...)`` links and images made relative to ``docs/``."""
    return _DOCS_LINK.sub("](", text)


def on_files(files, config):
    readme = Path(config["config_file_path"]).parent / "README.md"
    files.append(File.generated(config, "index.md", content=readme_as_home(readme.read_text(encoding="utf-8"))))
    return files
