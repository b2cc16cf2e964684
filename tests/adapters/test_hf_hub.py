"""`hf` with hub ids: loaded by transformers' own from_pretrained from a hub cache laid out here (HF_HOME, offline),
at the commit a revision resolves to, with the tokenizer of the same revision; the commit reaches reports,
grids and resume files. Nothing is mocked and nothing leaves the machine."""

from __future__ import annotations

import json

import pytest
import torch

import similarity_plugins as sp
from tests.helpers.hf_models import byt5, hub_cache, offline_hub, small_bpe, tiny_gpt2, zen_lines

MAIN, TAGGED = "1" * 40, "2" * 40
REPO = "org/tiny-gpt"


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """Two save_pretrained folders (other weights, other tokenizers) and a hub cache holding both as revisions."""
    root = tmp_path_factory.mktemp("hub")
    folders = {}
    for name, seed, tokenizer in (("main", 0, byt5()), ("tagged", 5, small_bpe(zen_lines()))):
        folders[name] = root / name
        tiny_gpt2(len(tokenizer), seed=seed, head=True).save_pretrained(folders[name])
        tokenizer.save_pretrained(folders[name])
    hub_cache(root / "home", REPO, folders["main"], MAIN, refs=("main",))
    hub_cache(root / "home", REPO, folders["tagged"], TAGGED, refs=("v1",))
    return root, folders


@pytest.fixture
def hub(saved, monkeypatch):
    root, folders = saved
    offline_hub(monkeypatch, root / "home")
    return folders


def _weights(model):
    return [p.detach().clone() for p in model.hf_model.parameters()]


def test_a_hub_id_loads_offline_at_the_commit_of_its_revision_with_that_revisions_tokenizer(hub):
    main = sp.hf(REPO)
    assert type(main.hf_model).__name__ == "GPT2LMHeadModel" and type(main.tokenizer).__name__ == "ByT5Tokenizer"
    assert main.source == {"path": None, "hub_id": REPO, "revision": None, "commit": MAIN}
    folder = sp.hf(str(hub["main"]))
    assert all(torch.equal(a, b) for a, b in zip(_weights(main), _weights(folder)))
    assert folder.source == {"path": str(hub["main"]), "hub_id": None, "revision": None, "commit": None}
    tagged = sp.hf(REPO, revision="v1", pooling="last")
    assert tagged.source == {"path": None, "hub_id": REPO, "revision": "v1", "commit": TAGGED}
    assert type(tagged.tokenizer).__name__ != "ByT5Tokenizer" and len(tagged.tokenizer) == 300   # that revision's BPE
    assert not torch.equal(_weights(tagged)[0], _weights(main)[0])
    pinned = sp.hf(REPO, revision=TAGGED, local_files_only=True, dtype="bfloat16", device="cpu")
    assert pinned.source["commit"] == TAGGED and next(pinned.parameters()).dtype == torch.bfloat16
    assert sp.layers(main) == sp.layers(folder) == ["transformer.drop", "transformer.h.0", "transformer.h.1"]


def test_a_vision_model_by_hub_id_brings_its_image_processor(monkeypatch, tmp_path):
    from transformers import ViTImageProcessor

    from tests.helpers.hf_models import tiny_vit

    tiny_vit().save_pretrained(tmp_path / "vit")
    ViTImageProcessor(size={"height": 16, "width": 16}).save_pretrained(tmp_path / "vit")
    hub_cache(tmp_path / "home", "org/tiny-vit", tmp_path / "vit", MAIN)
    offline_hub(monkeypatch, tmp_path / "home")
    wrapped = sp.hf("org/tiny-vit")
    assert type(wrapped.processor).__name__.startswith("ViTImageProcessor") and wrapped.preprocessing is not None
    assert wrapped.source["commit"] == MAIN and wrapped.view == "image"


def test_hub_ids_that_cannot_load_and_strings_that_are_no_model_say_why(hub, tmp_path):
    with pytest.raises(ValueError, match=r"cannot load the hub model 'org/tiny-gpt' at revision 'v2'.*HF_HUB_OFFLINE"):
        sp.hf(REPO, revision="v2")
    with pytest.raises(ValueError, match="cannot load the hub model 'org/absent'"):
        sp.hf("org/absent")
    for text in ("./runs/none", "a/b/c", "not--an-id"):
        with pytest.raises(ValueError, match="not a folder, and not a hub id either"):
            sp.hf(text)
    (tmp_path / "weights.bin").write_bytes(b"")
    with pytest.raises(ValueError, match="is a file, not a folder"):
        sp.hf(str(tmp_path / "weights.bin"))
    with pytest.raises(ValueError, match="applies to a hub id"):
        sp.hf(str(hub["main"]), revision="v1")
    with pytest.raises(ValueError, match="revision, dtype apply when hf.. loads a model"):
        sp.hf(tiny_gpt2(270), tokenizer=byt5(), revision="v1", dtype=torch.float16)


def test_the_commit_reaches_reports_grids_and_resume_files(hub, tmp_path):
    a, b = sp.hf(REPO), sp.hf(REPO, revision="v1")
    data = sp.text_data(zen_lines()[:8])
    report = sp.compare(a, b, "transformer.h.1", data, metrics=["cka-linear"])
    assert report.meta["sources"] == {"front": a.source, "end": b.source}
    assert json.loads(report.to_json())["meta"]["sources"]["end"]["commit"] == TAGGED
    resume = tmp_path / "cells.jsonl"
    grid = sp.compare_grid({"a": a, "b": b}, ["transformer.h.1"], data, "cka-linear", pairs="across", resume=resume)
    assert grid.meta["sources"] == {"a": a.source, "b": b.source}
    grid.to_json(tmp_path / "grid.json")
    assert sp.Grid.from_json(tmp_path / "grid.json").meta["sources"]["b"]["commit"] == TAGGED
    header = json.loads(resume.read_text().splitlines()[0])
    assert header["sources"]["a"]["commit"] == MAIN and "sources" not in header["fingerprint"]
    plain = sp.compare(torch.nn.Sequential(torch.nn.Flatten()), torch.nn.Sequential(torch.nn.Flatten()), "0",
                       sp.Data(test=torch.utils.data.TensorDataset(torch.rand(6, 3), torch.zeros(6).long())),
                       metrics=["cka-linear"])
    assert "sources" not in plain.meta   # models that record no source add nothing


def test_the_command_line_takes_hub_ids_with_a_revision(hub, tmp_path, capsys):
    from similarity_plugins.cli.main import main

    assert main(["layers", f"hf:{REPO}@v1", "--no-progress"]) == 0
    assert capsys.readouterr().out.split() == ["transformer.drop", "transformer.h.0", "transformer.h.1"]
    lines = tmp_path / "zen.txt"
    lines.write_text("\n".join(zen_lines()[:8]) + "\n", encoding="utf-8")
    out = tmp_path / "r.json"
    assert main(["compare", "--front", f"hf:{REPO}", "--end", f"hf:{REPO}@v1?pooling=last", "--layer", "transformer.h.1",
                 "--data", f"text:{lines}", "--metrics", "cka-linear", "--out", str(out), "--no-progress"]) == 0
    sources = json.loads(out.read_text())["meta"]["sources"]
    assert (sources["front"]["commit"], sources["end"]["commit"], sources["end"]["revision"]) == (MAIN, TAGGED, "v1")
    assert main(["layers", f"hf:{REPO}@v2"]) == 2
    assert "cannot load the hub model 'org/tiny-gpt' at revision 'v2'" in capsys.readouterr().err
