"""The command line with transformers models (``hf:DIR``) on text (``text:FILE``) and image-caption pairs."""

from __future__ import annotations

import json

import pytest
import torch

from similarity_plugins.cli.main import main
from tests.helpers.hf_models import byt5, tiny_gpt2, tiny_vit, zen_lines


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("hf")
    tok = byt5()
    for name, seed in (("a", 0), ("b", 5)):
        tiny_gpt2(len(tok), seed=seed, head=True).save_pretrained(root / name)
        tok.save_pretrained(root / name)
    tiny_vit().save_pretrained(root / "vit")
    (root / "zen.txt").write_text("\n".join(zen_lines()) + "\n", encoding="utf-8")
    return root


def test_layers_of_a_folder(folders, capsys):
    assert main(["layers", f"hf:{folders / 'a'}"]) == 0
    assert capsys.readouterr().out.split() == ["transformer.drop", "transformer.h.0", "transformer.h.1"]


def test_grid_and_compare_on_a_text_file(folders, tmp_path, capsys):
    out = tmp_path / "grid.json"
    code = main(["grid", "--model", f"a=hf:{folders / 'a'}", "--model", f"b=hf:{folders / 'b'}?pooling=last",
                 "--layers", "transformer.h.0,transformer.h.1", "--data", f"text:{folders / 'zen.txt'}",
                 "--metrics", "cka-linear", "--max-test", "12", "--option", "permutations=19", "--out", str(out)])
    assert code == 0 and out.exists()
    from similarity_plugins import Grid

    best = Grid.from_json(out).best_pair("cka-linear", "a", "b")
    printed = [line for line in capsys.readouterr().out.splitlines() if line.startswith("best ")]
    assert printed == [f"best cka-linear: a:{best['front_layer']} x b:{best['end_layer']} = {best['score']:.4f} "
                       f"(family-wise p = {best['p_value']:.4g})"]
    report = tmp_path / "r.json"
    code = main(["compare", "--front", f"hf:{folders / 'a'}", "--end", f"hf:{folders / 'b'}", "--layer",
                 "transformer.h.1", "--data", f"text:{folders / 'zen.txt'}", "--metrics", "cka-linear,stitch-slm",
                 "--out", str(report)])
    rows = {r["metric"]: r for r in json.loads(report.read_text())["results"]}
    assert rows["cka-linear"]["score"] is not None and rows["stitch-slm"]["score"] is None
    assert "training split" in rows["stitch-slm"]["error"]   # text:FILE is a test split
    assert code != 2


def test_pairs_of_images_and_captions(folders, tmp_path):
    from PIL import Image

    images = tmp_path / "images"
    images.mkdir()
    gen = torch.Generator().manual_seed(0)
    for i in range(len(zen_lines())):
        pixels = (torch.rand(16, 16, 3, generator=gen) * 255).to(torch.uint8).numpy()
        Image.fromarray(pixels).save(images / f"{i:03d}.png")
    captions = folders / "zen.txt"
    report = tmp_path / "p.json"
    code = main(["compare", "--front", f"hf:{folders / 'vit'}?pooling=first", "--end", f"hf:{folders / 'a'}",
                 "--layer", "layers.1:transformer.h.1", "--data", f"pairs:{images},{captions}",
                 "--metrics", "cka-linear", "--out", str(report)])
    assert code == 0
    assert json.loads(report.read_text())["results"][0]["score"] is not None
    assert main(["compare", "--front", f"hf:{folders / 'vit'}", "--end", f"hf:{folders / 'a'}", "--layer",
                 "layers.1:transformer.h.1", "--data", f"pairs:{images},{folders / 'a' / 'config.json'}",
                 "--metrics", "cka-linear"]) == 2
    from similarity_plugins.datasets import parse_data_spec

    both = parse_data_spec(f"pairs:{images},{captions},{images},{captions},8")   # a training split first
    assert len(both.train) == len(both.test) == len(zen_lines()) and both.test[0][0]["image"].shape == (3, 8, 8)
    with pytest.raises(ValueError, match="TRAIN_IMAGES,TRAIN_CAPTIONS,TEST_IMAGES,TEST_CAPTIONS"):
        parse_data_spec(f"pairs:{images},{captions},{images}")


def test_text_data_with_a_training_split_stitches_from_the_command_line(folders, tmp_path):
    train, test = tmp_path / "train.txt", tmp_path / "test.txt"
    lines = zen_lines()
    train.write_text("\n".join(lines[:12]) + "\n", encoding="utf-8")
    test.write_text("\n".join(lines[12:]) + "\n", encoding="utf-8")
    report = tmp_path / "r.json"
    code = main(["compare", "--front", f"hf:{folders / 'a'}", "--end", f"hf:{folders / 'b'}", "--layer",
                 "transformer.h.0", "--data", f"text:{train},{test}", "--metrics", "stitch-dm", "--epochs", "1",
                 "--out", str(report), "--no-progress"])
    row = json.loads(report.read_text())["results"][0]
    assert code == 0 and row["error"] is None and row["score"] is not None
    assert row["details"]["train_tokens"] > 0 and row["details"]["test_tokens"] > 0
    from similarity_plugins.datasets import parse_data_spec

    data = parse_data_spec(f"text:{train},{test}")
    assert data.train.texts == lines[:12] and data.test.texts == lines[12:]
    for bad in (f"text:{train},", f"text:{train},{test},{test}"):
        with pytest.raises(ValueError, match="use text:FILE"):
            parse_data_spec(bad)


def test_transformers_own_bars_follow_the_progress_flags(folders, capsys):
    from transformers.utils import logging

    before = logging.is_progress_bar_enabled()
    for flags, shown in (([], False), (["--no-progress"], False), (["--progress"], True)):
        assert main(["layers", f"hf:{folders / 'a'}", *flags]) == 0   # stderr is no terminal here: auto hides them
        assert ("Loading weights" in capsys.readouterr().err) is shown, flags
        assert logging.is_progress_bar_enabled() is before   # the setting comes back
