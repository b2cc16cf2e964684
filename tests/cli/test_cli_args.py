"""The command line from shared parts: each flag comes from its concern's group in ``cli/arguments.py`` and means the
same in every command; renamed flags keep their old spelling for one release, with a warning naming the new one."""

from __future__ import annotations

import argparse

import pytest

from similarity_plugins.cli.main import build_parser, main
from similarity_plugins.cli.options import metric_options

# every shared flag and the --help section (argument group) it belongs to
SHARED = {"--data": "data", "--max-train": "data", "--max-test": "data", "--variant": "data",
          "--variant-option": "data", "--seed": "run", "--device": "run", "--metrics": "metrics",
          "--option": "metrics", "--epochs": "metrics", "--num-classes": "models", "--in-channels": "models",
          "--out": "outputs", "--csv": "outputs", "--progress": "progress", "--no-progress": "progress"}

IRIS = ["iris", "--model", "small-cnn", "--layer", "block2", "--data", "digits", "--max-seeds", "4", "--steps", "3",
        "--no-progress"]


def _commands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(sub.choices)


def _deprecated(action: argparse.Action) -> bool:
    return (action.help or "").startswith("deprecated spelling of")


def test_every_shared_flag_comes_from_its_group_and_means_the_same_everywhere():
    seen: dict[str, tuple] = {}
    commands = _commands()
    for name, command in commands.items():
        for group in command._action_groups:
            for action in group._group_actions:
                for flag in set(action.option_strings) & set(SHARED):
                    if _deprecated(action):
                        continue
                    assert group.title == SHARED[flag], f"{name} {flag} is declared outside the {SHARED[flag]} group"
                    meaning = (action.dest, type(action), action.type, action.nargs, action.const)
                    assert seen.setdefault(flag, meaning) == meaning, f"{name} {flag} differs from another command's"
    assert set(seen) == set(SHARED)   # each shared flag is used somewhere, so this test reads every group
    for name in ("compare", "grid", "score", "iris", "train", "extract", "demo", "study"):
        assert "--seed" in commands[name]._option_string_actions or name == "extract", name


@pytest.mark.parametrize("argv,dest,value,new", [
    (["iris", "--model", "m", "--layer", "l", "--data", "d", "--out", "x.npz", "--option", "lr=0.1"],
     "tuning", ["lr=0.1"], "--tuning"),
    (["train", "--model", "m", "--data", "d", "--out", "w.pt", "--epochs", "3"], "donor_epochs", 3, "--donor-epochs"),
])
def test_an_old_spelling_still_works_and_warns_naming_the_new_flag(capsys, argv, dest, value, new):
    old = argv[-2]
    args = build_parser().parse_args(argv)
    assert getattr(args, dest) == value
    err = capsys.readouterr().err
    assert f"warning: {old} is deprecated" in err and f"use {new}" in err
    args = build_parser().parse_args([*argv[:-2], new, argv[-1]])   # the new spelling: the same value, no warning
    assert getattr(args, dest) == value and capsys.readouterr().err == ""


def test_the_old_iris_spelling_runs_the_same_checks(capsys):
    assert main([*IRIS, "--out", "iris.npz", "--option", "histroy=5"]) == 2
    err = capsys.readouterr().err
    assert "use --tuning" in err and "--tuning: unknown tuning key 'histroy'" in err and "did you mean 'history'" in err


def test_metric_options_reads_option_then_epochs_and_checks_them():
    args = argparse.Namespace(option=["epochs=3", "stitch-dm.lr=0.01"], epochs=5)
    assert metric_options(args, ["stitch-dm"]) == {"epochs": 5, "stitch-dm": {"lr": 0.01}}
    assert metric_options(argparse.Namespace(option=None), ["cka-linear"]) == {}
    with pytest.raises(ValueError, match="did you mean 'epochs'"):
        metric_options(argparse.Namespace(option=["epochz=3"], epochs=None), ["stitch-dm"])


@pytest.mark.parametrize("argv", [
    ["compare", "--front", "small-cnn", "--end", "small-cnn", "--layer", "block2", "--data", "digits"],
    ["grid", "--model", "a=small-cnn", "--layers", "block2", "--data", "digits"],
    ["score", "a.npy", "b.npy"],
])
def test_every_command_checks_metric_options_before_any_work(capsys, monkeypatch, argv):
    import similarity_plugins.cli.compare_inputs as compare_inputs
    import similarity_plugins.cli.grid as grid
    import similarity_plugins.cli.score as score

    fail = lambda *a, **k: pytest.fail("work started before the options were checked")  # noqa: E731
    for module, name in ((compare_inputs, "load_data"), (grid, "load_data"), (score, "load_array")):
        monkeypatch.setattr(module, name, fail)
    assert main([*argv, "--metrics", "cka-linear", "--option", "max_sample=5", "--no-progress"]) == 2
    assert "unknown option 'max_sample'" in capsys.readouterr().err
