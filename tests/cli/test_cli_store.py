"""The extract, grid --store and store commands."""

from __future__ import annotations

import json

import pytest
import torch

from similarity_plugins.apps.zoo import build_model
from similarity_plugins.cli.main import main


@pytest.mark.slow  # digits, two forward passes and a grid: about 8 s on 2 shared cores
def test_extract_then_grid_from_the_store_then_list(tmp_path, capsys):
    weights = tmp_path / "a.pt"
    torch.save(build_model("small-cnn", num_classes=10, in_channels=1).state_dict(), weights)
    store = str(tmp_path / "acts")
    common = ["--data", "digits", "--max-test", "64", "--in-channels", "1", "--num-classes", "10", "--no-progress"]
    code = main(["extract", "--model", f"a=small-cnn@{weights}", "--model", f"b=small-cnn@{weights}", "--layers",
                 "block1,block2", "--store", store, *common])
    assert code == 0
    out = capsys.readouterr().out
    assert "block2" in out and "64" in out and "similarity_plugins.extract" in out
    grid_json = tmp_path / "g.json"
    assert main(["grid", "--store", store, "--metrics", "cka-linear", "--pairs", "across", "--out", str(grid_json),
                 "--no-progress", "--cache-bytes", "64K"]) == 0
    saved = json.loads(grid_json.read_text())
    nodes = [tuple(node) for node in saved["nodes"]]
    scores = {(*nodes[c["front"]], *nodes[c["end"]]): c["result"]["score"] for c in saved["cells"]}
    # a and b are the same weights: a layer against itself across the models scores 1
    assert scores[("a", "block1", "b", "block1")] == pytest.approx(1.0, abs=1e-6)
    assert len(scores) == 8
    capsys.readouterr()
    assert main(["store", store]) == 0
    listing = capsys.readouterr().out.splitlines()
    assert sum("float32" in line for line in listing) == 4 and listing[0].split()[:4] == ["model", "layer", "N", "D"]


def test_grid_without_sources_says_what_is_missing(capsys):
    assert main(["grid", "--metrics", "cka-linear"]) == 2
    assert "--store DIR" in capsys.readouterr().err
    assert main(["store", "/nonexistent-store"]) == 2
    assert "not an activation store" in capsys.readouterr().err


def test_byte_sizes_read_with_units_and_refuse_anything_else():
    import argparse

    from similarity_plugins.cli.grid import byte_size

    assert byte_size("1048576") == 2**20
    assert byte_size("512M") == byte_size("512MiB") == byte_size("512mb") == 512 * 2**20
    assert byte_size("1.5G") == 3 * 2**29 and byte_size("0") == 0
    for bad in ("", "-1G", "4X", "nan", "inf", "G"):
        with pytest.raises(argparse.ArgumentTypeError, match="expected a size in bytes"):
            byte_size(bad)


def test_score_reads_store_entries(tmp_path, capsys):
    import numpy as np

    from similarity_plugins import Store, score

    rng = np.random.default_rng(0)
    x = rng.standard_normal((60, 8)).astype(np.float32)
    y = (x @ rng.standard_normal((8, 5))).astype(np.float32)
    store = Store.create(tmp_path / "acts")
    store.put("a", "block3", x)
    store.put("b", "fc", y)
    out = tmp_path / "r.json"
    folder = str(tmp_path / "acts")
    assert main(["score", f"{folder}:a:block3", f"{folder}:b:fc", "--metrics", "cka-linear", "--out", str(out),
                 "--no-progress"]) == 0
    row = json.loads(out.read_text())["results"][0]
    assert row["score"] == pytest.approx(score(x, y, "cka-linear").results[0].score, abs=1e-12)
    capsys.readouterr()
    assert main(["score", f"{folder}:a:nope", f"{folder}:b:fc", "--metrics", "cka-linear"]) == 2
    assert "nope" in capsys.readouterr().err
