"""The README is the front door: short, and its first screens show two language models by hub id and the store."""

from __future__ import annotations

from tests.helpers.docs_blocks import fenced_blocks
from tests.helpers.repo import ROOT

README = ROOT / "README.md"


def test_the_readme_stays_under_15_kb():
    assert len(README.read_bytes()) < 15 * 1024


def test_the_first_screens_show_language_models_by_hub_id_and_the_store():
    text = README.read_text(encoding="utf-8")
    blocks = fenced_blocks(README)
    hub = next(b for b in blocks if b.language == "python" and 'sp.hf("EleutherAI/' in b.code)
    assert hub.marker is not None and "compare_grid" in hub.code   # downloads: not run, and says why
    store = next(b for b in blocks if b.language == "bash" and "extract" in b.code)
    assert store.marker is None and "grid --store" in store.code   # runs in the full suite
    concepts = text.index("## Concepts")
    assert text.index(hub.code) < concepts and text.index(store.code) < concepts
    assert "`.[hf]`" in text


def test_the_docs_table_lists_the_pages_of_this_release():
    table = README.read_text(encoding="utf-8").split("## Documentation", 1)[1]
    for title, page in (("Language and vision-language models", "docs/language-models.md"),
                        ("Extract once, score many", "docs/store.md"), ("Architecture", "docs/architecture.md")):
        assert f"[{title}]({page})" in table, title
