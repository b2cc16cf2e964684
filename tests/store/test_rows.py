"""Rows of store entries correspond by sample, never by position: grids, score, streamed and the CLI."""

from __future__ import annotations

import json

import numpy as np
import pytest

import similarity_plugins as sp
from similarity_plugins import functional as F
from similarity_plugins.cli.main import main


def _pair(n: int = 120, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, 6)).astype(np.float32)
    y = (x @ rng.standard_normal((6, 5)) + 0.3 * rng.standard_normal((n, 5))).astype(np.float32)
    return x, y


def _shuffled_store(tmp_path, n: int = 120):
    """Entry a holds samples 1000.. in order; entry b the same samples in another order (ids say which)."""
    x, y = _pair(n)
    order = np.random.default_rng(5).permutation(n)
    store = sp.Store.create(tmp_path / "s")
    store.put("a", "l", x, sample_ids=np.arange(1000, 1000 + n))
    store.put("b", "l", y[order], sample_ids=1000 + order)
    return store, x, y


METRICS = ["cka-linear", "procrustes", "cca"]


def test_the_same_samples_in_another_order_are_aligned_everywhere(tmp_path):
    store, x, y = _shuffled_store(tmp_path)
    want = {m: r.score for m, r in zip(METRICS, sp.score(x, y, METRICS).results)}
    shuffled = {m: r.score for m, r in zip(METRICS, sp.score(np.asarray(store.load("a", "l")),
                                                             np.asarray(store.load("b", "l")), METRICS).results)}
    assert abs(shuffled["cka-linear"] - want["cka-linear"]) > 0.1  # by position the numbers are wrong
    got = sp.score(store.load("a", "l"), store.load("b", "l"), METRICS)
    for r in got.results:
        assert r.error is None and r.score == pytest.approx(want[r.metric], abs=1e-10), r.metric
    assert got.meta["samples"] == {"kept": 120, "dropped": {"a:l": 0, "b:l": 0}}
    assert got.meta["provenance"]["data"]["y"] == {"store": store.path, "entry": "b:l", "shape": [120, 5],
                                                   "dtype": "float32", "fingerprint": None}  # put: inputs unknown
    grid = sp.compare_grid(metrics=METRICS, pairs="across", store=store.path)
    for r in grid.report.results:
        assert r.score == pytest.approx(want[r.metric], abs=1e-10), r.metric
    for m in ("cka-linear", "procrustes", "cca", "linear-regression"):
        reference = sp.score(x, y, m).results[0].score
        assert F.streamed(store.load("a", "l"), store.load("b", "l"), m, rows=17) == pytest.approx(reference, abs=1e-10)


def test_other_samples_are_refused_naming_both_entries_unless_shared(tmp_path):
    x, y = _pair(100)
    store = sp.Store.create(tmp_path / "s")
    store.put("a", "l", x[:80], sample_ids=np.arange(80))
    store.put("b", "l", y[20:], sample_ids=np.arange(20, 100))
    with pytest.raises(sp.StoreError, match=r"a:l and b:l hold different samples.*60 of them in both.*shared"):
        sp.compare_grid(metrics=["cka-linear"], store=store.path)
    with pytest.raises(sp.StoreError, match="different samples"):
        sp.score(store.load("a", "l"), store.load("b", "l"), "cka-linear")
    with pytest.raises(sp.StoreError, match="different samples"):
        F.streamed(store.load("a", "l"), store.load("b", "l"))
    want = sp.score(x[20:80], y[20:80], "cka-linear").results[0].score
    with pytest.warns(UserWarning, match="kept the 60 samples every entry holds; dropped 20 of a:l, 20 of b:l"):
        grid = sp.compare_grid(metrics=["cka-linear"], pairs="across", store=store.path, shared_samples=True)
    assert grid.report.results[0].score == pytest.approx(want, abs=1e-10)
    assert grid.meta["samples"] == {"kept": 60, "dropped": {"a:l": 20, "b:l": 20}}
    with pytest.warns(UserWarning, match="dropped 20 of a:l"):
        report = sp.score(store.load("a", "l"), store.load("b", "l"), "cka-linear", shared_samples=True)
    assert report.results[0].score == pytest.approx(want, abs=1e-10)


def _text_store(tmp_path, other_texts: bool):
    from tests.helpers.hf_models import byt5, tiny_gpt2, zen_lines

    tok = byt5()
    lines = zen_lines()
    first, second = sp.text_data(lines[:10]), sp.text_data(lines[9:19] if other_texts else lines[:10])
    store = tmp_path / "s"
    sp.extract({"a": sp.hf(tiny_gpt2(len(tok), seed=0), tokenizer=tok)}, ["h.1"], first, store, batch_size=4)
    sp.extract({"b": sp.hf(tiny_gpt2(len(tok), seed=1), tokenizer=tok)}, ["h.1"], second, store, batch_size=4)
    return sp.Store(store)


def test_entries_extracted_from_different_data_are_refused(tmp_path):
    store = _text_store(tmp_path, other_texts=True)
    assert np.array_equal(store.sample_ids("a", "h.1"), store.sample_ids("b", "h.1"))  # the same ids 0..9
    with pytest.raises(sp.StoreError, match=r"a:h\.1 and b:h\.1 were made from different data.*10 of their 10"):
        sp.compare_grid(metrics=["cka-linear"], store=store.path)
    with pytest.raises(sp.StoreError, match="different data"):
        sp.score(store.load("a", "h.1"), store.load("b", "h.1"), "cka-linear")
    with pytest.raises(sp.StoreError, match="different data"):  # keeping shared ids does not pair other inputs
        sp.compare_grid(metrics=["cka-linear"], store=store.path, shared_samples=True)


def test_entries_extracted_from_the_same_data_pair_up(tmp_path):
    store = _text_store(tmp_path, other_texts=False)
    grid = sp.compare_grid(metrics=["cka-linear"], pairs="across", store=store.path)
    x, y = np.asarray(store.load("a", "h.1")), np.asarray(store.load("b", "h.1"))
    assert grid.report.results[0].score == pytest.approx(F.cka(x, y), abs=1e-12)


def test_the_cli_pairs_store_entries_by_sample(tmp_path, capsys):
    store, x, y = _shuffled_store(tmp_path)
    out = tmp_path / "r.json"
    assert main(["score", f"{store.path}:a:l", f"{store.path}:b:l", "--metrics", "cka-linear", "--out", str(out),
                 "--no-progress"]) == 0
    assert json.loads(out.read_text())["results"][0]["score"] == pytest.approx(F.cka(x, y), abs=1e-10)
    other = sp.Store.create(tmp_path / "o")
    other.put("a", "l", x[:50], sample_ids=np.arange(50))
    other.put("b", "l", y, sample_ids=np.arange(120))
    capsys.readouterr()
    assert main(["score", f"{other.path}:a:l", f"{other.path}:b:l", "--metrics", "cka-linear"]) == 2
    assert "different samples" in capsys.readouterr().err
    with pytest.warns(UserWarning, match="dropped 70 of b:l"):
        assert main(["score", f"{other.path}:a:l", f"{other.path}:b:l", "--metrics", "cka-linear", "--shared-samples",
                     "--out", str(out), "--no-progress"]) == 0
    assert json.loads(out.read_text())["results"][0]["score"] == pytest.approx(F.cka(x[:50], y[:50]), abs=1e-10)
