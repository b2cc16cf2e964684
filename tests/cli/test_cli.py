"""The command line: list, layers, compare (JSON/CSV output), errors with exit code 2."""

from __future__ import annotations

import csv
import json
import subprocess
import sys

import pytest

from similarity_plugins.cli import main, parse_layer, parse_options


def test_parse_options_and_layers():
    assert parse_options(["epochs=5", "stitch-dm.lr=0.01", "init=identity", "flag=true", "stitch_bn=yes"]) == {
        "epochs": 5, "stitch-dm": {"lr": 0.01}, "init": "identity", "flag": True, "stitch_bn": True}
    assert parse_layer("layer1") == "layer1"
    assert parse_layer("layer1:layer2") == ("layer1", "layer2")
    assert parse_layer("layer1->layer2") == ("layer1", "layer2")
    with pytest.raises(ValueError, match="--option expects KEY=VALUE, got 'no-equals-sign'"):
        parse_options(["no-equals-sign"])


def test_list(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert "cka-linear" in out and "similarity-plugins" in out
    assert main(["list", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert {"name", "package", "description", "error"} <= set(rows[0])


def test_layers(capsys):
    assert main(["layers", "torchvision:resnet18", "--num-classes", "10"]) == 0
    lines = capsys.readouterr().out.split()
    assert lines[0] == "maxpool" and "layer4.1" in lines


def test_compare_writes_json_and_csv(tmp_path, capsys):
    import torch

    from similarity_plugins.apps.zoo import build_model

    weights = tmp_path / "w.pt"
    torch.save(build_model("small-cnn", num_classes=10, in_channels=1).state_dict(), weights)
    out, table = tmp_path / "r.json", tmp_path / "r.csv"
    spec = f"small-cnn@{weights}"
    code = main(["compare", "--front", spec, "--end", spec, "--in-channels", "1", "--num-classes", "10",
                 "--layer", "block2", "--layer", "block3:block3", "--metrics", "cka-linear,cka-debiased",
                 "--data", "digits", "--max-test", "100", "--out", str(out), "--csv", str(table), "--no-progress"])
    assert code == 0
    printed = capsys.readouterr().out
    assert "cka-linear" in printed and "block2" in printed
    report = json.loads(out.read_text())
    assert [r["layer"] for r in report["results"]] == ["block2", "block2", "block3", "block3"]
    assert all(r["score"] == pytest.approx(1.0) for r in report["results"])  # same weights on both sides
    rows = list(csv.DictReader(table.open()))
    assert len(rows) == 4 and rows[0]["metric"] == "cka-linear"


def test_errors_exit_2_with_a_message(capsys):
    assert main(["layers", "torchvision:resnet1000"]) == 2
    assert "resnet" in capsys.readouterr().err
    code = main(["compare", "--front", "small-cnn", "--end", "small-cnn", "--in-channels", "1", "--layer", "block9",
                 "--metrics", "cka-linear", "--data", "digits", "--no-progress"])
    assert code == 2
    assert "block9" in capsys.readouterr().err
    code = main(["compare", "--front", "small-cnn", "--end", "small-cnn", "--in-channels", "1", "--layer", "block1",
                 "--metrics", "cka-lin", "--data", "digits", "--no-progress"])
    assert code == 2 and "did you mean" in capsys.readouterr().err
    assert main(["compare", "--front", "small-cnn", "--end", "small-cnn", "--layer", "block1",
                 "--data", "nowhere:/x", "--no-progress"]) == 2


@pytest.mark.slow  # two fresh interpreters
def test_console_script_and_module_entry():
    done = subprocess.run([sys.executable, "-m", "similarity_plugins", "--help"], capture_output=True, text=True)
    assert done.returncode == 0 and "compare" in done.stdout and "demo" in done.stdout


@pytest.mark.slow  # trains a donor through the CLI
def test_train_reports_accuracies_and_saves_weights(tmp_path, capsys):
    import torch

    out = tmp_path / "shortcut.pt"
    code = main(["train", "--model", "small-cnn", "--data", "digits", "--variant", "pixel-shortcut",
                 "--variant-option", "swap_fraction=0.5", "--seed", "0", "--donor-epochs", "1", "--max-train", "256",
                 "--out", str(out), "--no-progress"])
    assert code == 0
    printed = capsys.readouterr().out
    for name in ("clean", "pixel-shortcut", "shortcut-removed", "shortcut-randomised"):
        assert "test accuracy on" in printed and name in printed
    state = torch.load(out, weights_only=True)
    assert "fc.weight" in state
    assert main(["layers", f"small-cnn@{out}", "--in-channels", "1", "--num-classes", "10"]) == 0
    # the same seed gives the same network, whatever ran before in the process (initial weights are seeded)
    torch.rand(7)
    again = tmp_path / "again.pt"
    assert main(["train", "--model", "small-cnn", "--data", "digits", "--variant", "pixel-shortcut",
                 "--variant-option", "swap_fraction=0.5", "--seed", "0", "--donor-epochs", "1", "--max-train", "256",
                 "--out", str(again), "--no-progress"]) == 0
    state2 = torch.load(again, weights_only=True)
    assert all(torch.equal(state[k], state2[k]) for k in state)


@pytest.mark.parametrize("suffix", [".npz", ".safetensors"])
def test_iris_command_writes_a_loadable_file(tmp_path, capsys, suffix):
    if suffix == ".safetensors":
        pytest.importorskip("safetensors")
    from similarity_plugins.iri.store import load_iris

    out = tmp_path / f"iris{suffix}"
    code = main(["iris", "--model", "small-cnn", "--layer", "block2", "--data", "digits", "--max-seeds", "8",
                 "--steps", "5", "--out", str(out), "--no-progress"])
    assert code == 0
    assert "median relative error" in capsys.readouterr().out
    iris, extras = load_iris(out)
    assert iris.inputs.shape == (8, 1, 32, 32) and extras["labels"].shape == (8,)
    assert float(iris.inputs.min()) >= 0.0 and float(iris.inputs.max()) <= 1.0
    assert extras["summary"]["n"] == 8
    assert main(["iris", "--model", "small-cnn", "--layer", "block2", "--data", "digits", "--max-seeds", "8",
                 "--steps", "5", "--out", str(tmp_path / "x.txt"), "--no-progress"]) == 2


def test_compare_on_a_variant(tmp_path, capsys):
    out = tmp_path / "r.json"
    code = main(["compare", "--front", "small-cnn", "--end", "small-cnn", "--layer", "block2", "--data", "digits",
                 "--variant", "pixel-shortcut", "--metrics", "cka-linear", "--max-test", "64", "--out", str(out),
                 "--no-progress"])
    assert code == 0 and json.loads(out.read_text())["results"][0]["score"] > 0


def test_variant_alias_gets_the_seed():
    import torch
    from torch.utils.data import TensorDataset

    from similarity_plugins.cli.loading import apply_variant

    g = torch.Generator().manual_seed(0)
    base = TensorDataset(torch.rand(200, 1, 16, 16, generator=g), torch.randint(0, 10, (200,), generator=g))
    alias = apply_variant("shortcut-randomized", base, seed=7, num_classes=10)
    canonical = apply_variant("Shortcut_Randomised", base, seed=7, num_classes=10)
    other = apply_variant("shortcut-randomised", base, seed=8, num_classes=10)
    assert torch.equal(alias.stamped_labels, canonical.stamped_labels)
    assert not torch.equal(alias.stamped_labels, other.stamped_labels)
    with pytest.raises(ValueError, match="did you mean 'pixel-shortcut'"):
        apply_variant("pixel-shortcutt", base, seed=0)


def test_model_specs_are_parsed_by_the_zoo(tmp_path):
    from similarity_plugins.cli.loading import load_data, load_model

    data = load_data("digits", max_train=8, max_test=8)
    model = load_model(" Small-CNN?width=8", None, None, data)  # as build_model reads it: channels from the data
    assert model.block1[0].in_channels == 1 and model.block1[0].out_channels == 8


def test_iris_command_takes_advanced_options_and_compile(tmp_path, capsys, monkeypatch):
    from similarity_plugins import iri
    from similarity_plugins.iri.store import load_iris

    out = tmp_path / "iris.npz"
    base = ["iris", "--model", "small-cnn", "--layer", "block2", "--data", "digits", "--max-seeds", "4",
            "--steps", "3", "--out", str(out), "--no-progress"]
    assert main([*base, "--optimizer", "lbfgs", "--tuning", "history=5", "--tuning", "fold_bn=no"]) == 0
    iris, _ = load_iris(out)
    assert iris.settings["optimizer"] == "lbfgs" and iris.settings["history"] == 5
    assert iris.settings["fold_bn"] is False
    assert "(preset lbfgs, optimizer lbfgs)" in capsys.readouterr().out
    assert main([*base, "--tuning", "preset=resnet", "--cycle-steps", "7"]) == 0
    iris, _ = load_iris(out)
    assert (iris.settings["preset"], iris.settings["beta1"], iris.settings["cycle_steps"]) == ("resnet", 0.98, 7)
    assert main([*base, "--tuning", "history=5"]) == 2          # the adam preset takes no L-BFGS value
    assert "apply only to optimizer lbfgs" in capsys.readouterr().err
    assert main([*base, "--tuning", "histroy=5"]) == 2
    assert "did you mean 'history'" in capsys.readouterr().err
    assert main([*base, "--tuning", "steps=5"]) == 2
    assert "use --steps" in capsys.readouterr().err
    assert main([*base, "--tuning", "compile=no"]) == 2
    assert "use --compile" in capsys.readouterr().err
    seen = {}
    real = iri.generate_iris

    def spy(*args, **kwargs):
        seen.update(kwargs)
        return real(*args, **{k: v for k, v in kwargs.items() if k != "compile"})

    monkeypatch.setattr(iri, "generate_iris", spy)
    assert main([*base, "--compile", "--tuning", "fake_relu=none"]) == 0
    assert seen["compile"] is True and seen["tuning"] == {"fake_relu": None}   # "none", as the CLI reads it
    monkeypatch.setattr("similarity_plugins.cli.iris.load_data", lambda *_a: pytest.fail("options are checked first"))
    assert main([*base, "--tuning", "histroy=5"]) == 2


def test_iri_tuning_option_is_read_as_json():
    """``--option 'iri_tuning={"preset": "resnet"}'``: a JSON value becomes the dict the iri-* metrics take."""
    from similarity_plugins.cli.options import parse_options

    assert parse_options(['iri_tuning={"preset": "resnet", "lr": 0.1}']) == {"iri_tuning": {"preset": "resnet", "lr": 0.1}}
    assert parse_options(['iri-slm.iri_tuning={"fold_bn": false}']) == {"iri-slm": {"iri_tuning": {"fold_bn": False}}}
