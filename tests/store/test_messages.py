"""Provenance and messages: what made an entry, damaged files named and repaired, refusals that say what to do."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from torch.utils.data import TensorDataset

import similarity_plugins as sp
from similarity_plugins.cli.main import main
from tests.helpers.models import tiny_cnn


def _data(n: int = 8) -> sp.Data:
    g = torch.Generator().manual_seed(1)
    return sp.Data(test=TensorDataset(torch.rand(n, 1, 16, 16, generator=g), torch.zeros(n, dtype=torch.long)))


def test_an_entry_records_what_made_it_and_the_listing_shows_it(tmp_path, capsys):
    pytest.importorskip("transformers")
    from tests.helpers.hf_models import byt5, tiny_gpt2, zen_lines

    tok = byt5()
    wrapped = sp.hf(tiny_gpt2(len(tok)), tokenizer=tok)
    wrapped.source = {"path": None, "hub_id": "org/tiny", "revision": "main", "commit": "0123abc"}  # set by hf()
    store = sp.extract({"lm": wrapped}, ["h.1"], sp.text_data(zen_lines()[:4]), tmp_path, batch_size=2)
    made = store.entry("lm", "h.1")["produced_by"]
    assert made["model_class"] == "HFModel" and made["hf_class"] == "GPT2Model"
    assert made["source"] == wrapped.source
    assert made["tokenizer"] == {"name": "ByT5Tokenizer", "vocabulary": len(tok)}
    sp.extract({"cnn": tiny_cnn()}, ["fc"], _data(), tmp_path)
    assert store.entry("cnn", "fc")["produced_by"]["model_class"] == "Sequential"
    capsys.readouterr()
    assert main(["store", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "lm: GPT2Model, from org/tiny@main (commit 0123abc), tokenizer ByT5Tokenizer (384 tokens)" in out
    assert "cnn: Sequential" in out


def test_damaged_json_is_named_and_extract_repairs_it(tmp_path):
    model, data = tiny_cnn(), _data()
    sp.extract({"m": model}, ["fc"], data, tmp_path)
    manifest = tmp_path / "m" / "fc" / "manifest.json"
    manifest.write_text('{"format": "similarity-plugins-store-2", "model": ')
    with pytest.raises(sp.StoreError, match=f"{manifest}.*not valid JSON|{manifest}.*JSON"):
        sp.Store(tmp_path).load("m", "fc")
    with pytest.raises(sp.StoreError, match="manifest.json"):
        sp.Store(tmp_path).models  # noqa: B018
    store = sp.extract({"m": model}, ["fc"], data, tmp_path)
    assert store.extracted["m"] == {"forwarded": 0, "found": 8}  # its chunks were intact: only the manifest rewritten
    assert store.load("m", "fc").shape == (8, 10)
    entry = store.entry("m", "fc")
    ids = tmp_path / "m" / "fc" / entry["key"] / entry["samples"]["ids"]
    ids.write_bytes(b"")  # a sample file lost in a crash (they are not fsync'ed)
    with pytest.raises(sp.CorruptChunk, match="does not match its checksum"):
        store.sample_ids("m", "fc")
    store = sp.extract({"m": model}, ["fc"], data, tmp_path)
    assert store.extracted["m"]["forwarded"] == 0 and store.sample_ids("m", "fc").tolist() == list(range(8))
    (tmp_path / "store.json").write_text("{not json")
    with pytest.raises(sp.StoreError, match="store.json"):
        sp.Store(tmp_path)
    assert sp.extract({"m": model}, ["fc"], data, tmp_path).load("m", "fc").shape == (8, 10)


def test_a_manifest_is_checked_against_its_chunks(tmp_path):
    store = sp.Store.create(tmp_path)
    store.put("m", "l", [np.ones((5, 3), np.float32), np.zeros((4, 3), np.float32)])
    path = tmp_path / "m" / "l" / "manifest.json"
    good = json.loads(path.read_text())
    edits = {"shape": [10, 3], "dtype": "object", "model": "other"}
    for key, value in edits.items():
        path.write_text(json.dumps({**good, key: value}))
        with pytest.raises(sp.StoreError, match=str(path)):
            store.load("m", "l")
    path.write_text(json.dumps({**good, "shape": [9, 4]}))
    with pytest.raises(sp.CorruptChunk, match="its manifest says"):
        np.asarray(store.load("m", "l"))
    path.write_text(json.dumps({**good, "chunks": good["chunks"][::-1]}))
    with pytest.raises(sp.StoreError, match="where rows 0.. come next"):
        store.load("m", "l")


def test_refusals_of_empty_entries_old_stores_and_store_only_grids(tmp_path):
    store = sp.Store.create(tmp_path / "s")
    for empty in (np.zeros((0, 4), np.float32), [], iter([np.zeros((0, 4), np.float32)])):
        with pytest.raises(sp.StoreError, match="got no rows"):
            store.put("m", "l", empty)
    old = tmp_path / "old"
    old.mkdir()
    (old / "store.json").write_text(json.dumps({"format": "similarity-plugins-store-1"}))
    with pytest.raises(sp.StoreError, match="earlier format.*extract into a new folder"):
        sp.extract({"m": tiny_cnn()}, ["fc"], _data(), old)
    sp.extract({"m": tiny_cnn()}, ["fc"], _data(), tmp_path / "s")
    with pytest.raises(ValueError, match="would ignore the data"):
        sp.compare_grid(layers=None, data=_data(), metrics=["cka-linear"], store=tmp_path / "s")
    grid = sp.compare_grid(metrics=["cka-linear", "stitch-slm"], store=tmp_path / "s")
    rows = {r.metric: r for r in grid.report.results}
    assert rows["cka-linear"].error is None
    assert "stitching and IRIs need them" in rows["stitch-slm"].error
    assert "compare_grid(models, layers, data, metrics, store=...)" in rows["stitch-slm"].error


@pytest.mark.slow  # digits and two extractions through the command line: about 2 s
def test_a_rerun_of_the_extract_command_says_what_it_forwarded_and_found(tmp_path, capsys):
    from similarity_plugins.apps.zoo import build_model

    weights = tmp_path / "a.pt"
    torch.save(build_model("small-cnn", num_classes=10, in_channels=1).state_dict(), weights)
    common = ["--data", "digits", "--max-test", "20", "--in-channels", "1", "--num-classes", "10", "--no-progress"]
    for _ in range(2):
        assert main(["extract", "--model", f"a=small-cnn@{weights}", "--layers", "block2", "--store",
                     str(tmp_path / "s"), *common]) == 0
    assert "extract: model a: forwarded 0 samples, found 20 in the store" in capsys.readouterr().out


def test_the_command_line_names_commands_and_takes_names_with_colons(tmp_path, capsys):
    empty = tmp_path / "empty"
    sp.Store.create(empty)
    assert main(["grid", "--store", str(empty), "--metrics", "cka-linear", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "`similarity-plugins extract`" in err and "similarity_plugins.extract" not in err
    store = sp.Store.create(tmp_path / "c")
    rng = np.random.default_rng(0)
    x = rng.standard_normal((30, 4)).astype(np.float32)
    store.put("org/m:v2", "l", x)
    store.put("b", "a:b", x[:, :2])
    out = tmp_path / "r.json"
    assert main(["score", f"{store.path}:org/m:v2:l", f"{store.path}:b:a\\:b", "--metrics", "cka-linear",
                 "--out", str(out), "--no-progress"]) == 0
    assert json.loads(out.read_text())["results"][0]["score"] == pytest.approx(sp.functional.cka(x, x[:, :2]))
    store.put("b:a", "b", x)  # now "b:a:b" reads as two entries
    capsys.readouterr()
    assert main(["score", f"{store.path}:b:a:b", f"{store.path}:b:a:b", "--metrics", "cka-linear"]) == 2
    assert "write a ':' that belongs to a name as '\\:'" in capsys.readouterr().err


def test_the_progress_bar_of_extract_counts_samples_to_a_total(tmp_path, capsys):
    sp.extract({"m": tiny_cnn()}, ["fc"], _data(6), tmp_path, batch_size=4, progress="always")
    assert "| 0/6 [" in capsys.readouterr().err
