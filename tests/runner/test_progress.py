"""Output hygiene: progress bars only on a terminal unless asked for; tables to stdout, errors to stderr."""

from __future__ import annotations

import io
import re
import warnings
from typing import get_args

import pytest

import similarity_plugins as sp
from similarity_plugins.cli import main
from similarity_plugins.utils.progress import (
    ENV_VAR,
    PROGRESS_MODES,
    Progress,
    check_progress,
    progress_bar,
    progress_mode,
    shows_progress,
    tqdm_disable,
)

pytestmark = pytest.mark.usefixtures("one_torch_thread")

BAR = re.compile(r"\d+%\|")


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_the_rule(monkeypatch):
    monkeypatch.delenv(ENV_VAR, raising=False)
    assert (tqdm_disable("never"), tqdm_disable("auto"), tqdm_disable("always")) == (True, None, False)
    assert shows_progress("auto", Terminal()) and not shows_progress("auto", io.StringIO())
    assert shows_progress("always", io.StringIO()) and not shows_progress("never", Terminal())
    monkeypatch.setenv(ENV_VAR, "always")
    assert shows_progress("auto", io.StringIO()) and not shows_progress("never", io.StringIO())
    monkeypatch.setenv(ENV_VAR, "never")
    assert not shows_progress("auto", Terminal()) and shows_progress("always", io.StringIO())
    monkeypatch.setenv(ENV_VAR, "sometimes")
    with pytest.raises(ValueError, match=ENV_VAR):
        shows_progress("auto")
    with pytest.raises(ValueError, match="progress must be"):
        tqdm_disable("yes")


def test_progress_is_one_of_three_names():
    assert PROGRESS_MODES == ("never", "auto", "always") == get_args(Progress)
    assert [check_progress(m) for m in PROGRESS_MODES] == list(PROGRESS_MODES)
    for bad in ("yes", "verbose", None, 1, 0):
        with pytest.raises(ValueError, match="progress must be one of 'never', 'auto', 'always'"):
            check_progress(bad)


def test_the_old_bools_still_work_and_warn():
    """``False``/``True`` mean ``"never"``/``"auto"``: the public calls warn once, naming the word to write."""
    assert (progress_mode(False), progress_mode(True)) == ("never", "auto")
    with pytest.warns(DeprecationWarning, match="progress=False is deprecated; write progress='never'"):
        assert check_progress(False) == "never"
    with pytest.warns(DeprecationWarning, match="progress=True is deprecated; write progress='auto'"):
        assert check_progress(True) == "auto"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_progress("auto")   # the names warn of nothing
        progress_mode(True)      # nor does the inner reading (the public call already warned)


@pytest.mark.parametrize("call", ["compare", "score", "compare_grid", "generate_iris", "run_study",
                                  "train_classifier", "extract", "excess_agreement"])
def test_public_calls_default_to_a_name(call):
    import inspect

    from similarity_plugins.apps.experiments import excess_agreement
    from similarity_plugins.apps.studies import run_study
    from similarity_plugins.apps.training import train_classifier
    from similarity_plugins.iri.generate import generate_iris
    from similarity_plugins.store.extract import extract

    fn = {"run_study": run_study, "train_classifier": train_classifier, "generate_iris": generate_iris,
          "extract": extract, "excess_agreement": excess_agreement}.get(call) or getattr(sp, call)
    assert inspect.signature(fn).parameters["progress"].default in PROGRESS_MODES


def test_bars_follow_the_stream(monkeypatch):
    monkeypatch.delenv(ENV_VAR, raising=False)
    for stream, progress, drawn in ((Terminal(), "auto", True), (io.StringIO(), "auto", False),
                                    (io.StringIO(), "always", True), (Terminal(), "never", False),
                                    (Terminal(), True, True), (Terminal(), False, False)):
        for _ in progress_bar(range(3), progress=progress, file=stream, desc="work"):
            pass
        assert bool(BAR.search(stream.getvalue())) is drawn, (progress, type(stream).__name__)


def test_compare_refuses_a_bad_progress_value_before_any_work(data):
    from similarity_plugins.apps.zoo import SmallCNN

    a = SmallCNN(in_channels=1, width=4)
    with pytest.raises(ValueError, match="progress must be"):
        sp.compare(a, a, "block3", data, metrics="cka-linear", progress="verbose")


COMPARE = ["compare", "--front", "small-cnn", "--end", "small-cnn", "--layer", "block3", "--data", "digits",
           "--metrics", "cka-linear,stitch-hlm", "--epochs", "1", "--max-train", "64", "--max-test", "64"]


def test_cli_into_a_pipe_draws_no_bar_unless_asked(capfd, monkeypatch):
    monkeypatch.delenv(ENV_VAR, raising=False)
    assert main(COMPARE) == 0
    out, err = capfd.readouterr()
    assert "stitch-hlm" in out and "cka-linear" in out   # the table: stdout
    assert not BAR.search(out + err)
    assert main([*COMPARE, "--progress"]) == 0            # asked for: bars on stderr, none on stdout
    out, err = capfd.readouterr()
    assert BAR.search(err) and "stitch hlm" in err and not BAR.search(out)
    monkeypatch.setenv(ENV_VAR, "always")
    assert main([*COMPARE, "--no-progress"]) == 0         # --no-progress wins over the environment
    out, err = capfd.readouterr()
    assert not BAR.search(out + err)


def test_every_command_takes_both_flags():
    from similarity_plugins.cli.main import build_parser

    commands = next(a for a in build_parser()._actions if a.dest == "command").choices
    assert {"list", "info", "layers", "compare", "train", "iris", "demo", "study", "bench"} <= set(commands)
    for name, sub in commands.items():
        assert {"--progress", "--no-progress"} <= set(sub._option_string_actions), name


def test_errors_go_to_stderr_with_exit_2(capfd):
    assert main(["compare", "--front", "small-cnn", "--end", "small-cnn", "--layer", "block9", "--data", "digits",
                 "--metrics", "cka-linear"]) == 2
    out, err = capfd.readouterr()
    assert out == "" and err.startswith("error:") and "block9" in err


def test_score_draws_a_bar_only_when_asked(capfd, monkeypatch):
    import numpy as np

    monkeypatch.delenv(ENV_VAR, raising=False)
    x = np.random.default_rng(0).standard_normal((40, 6))
    for progress, drawn in (("never", False), ("auto", False), ("always", True)):
        report = sp.score(x, 2 * x, metrics="cka-linear", progress=progress)
        assert abs(report["cka-linear"].score - 1.0) < 1e-9
        assert bool(BAR.search(capfd.readouterr().err)) is drawn, progress
    with pytest.raises(ValueError, match="progress must be"):
        sp.score(x, x, metrics="cka-linear", progress="loud")
