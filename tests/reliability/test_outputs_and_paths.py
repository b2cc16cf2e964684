"""Outputs that are not regular files are refused (never replaced), and the CLI resolves output paths once."""

from __future__ import annotations

import json
import os
import stat

import numpy as np
import pytest

from similarity_plugins import Grid, Report, SimilarityResult
from similarity_plugins.cli import main
from similarity_plugins.utils.io import atomic_write, unwritable_reason, write_all


@pytest.fixture
def fifo(tmp_path):
    path = tmp_path / "pipe.json"
    os.mkfifo(path)
    return path


def _still_fifo(path) -> bool:
    return stat.S_ISFIFO(os.lstat(path).st_mode)


def test_atomic_write_refuses_a_fifo_and_leaves_it(fifo):
    with pytest.raises(OSError, match="named pipe"):
        with atomic_write(fifo, "w") as fh:
            fh.write("x")
    assert _still_fifo(fifo)
    assert sorted(os.listdir(fifo.parent)) == ["pipe.json"]  # no temporary file left


def test_write_all_and_report_to_json_refuse_a_fifo(fifo, tmp_path):
    other = tmp_path / "other.csv"
    with pytest.raises(OSError, match="pipe.json"):
        write_all({str(other): "a\n", str(fifo): "b\n"})
    assert _still_fifo(fifo) and not other.exists()  # all or none
    report = Report([SimilarityResult("m", 0.5)])
    with pytest.raises(OSError, match="not a regular file"):
        report.to_json(str(fifo))
    assert _still_fifo(fifo)


@pytest.mark.parametrize("write", ["report.to_csv", "grid.to_json", "grid.heatmap", "link"])
def test_every_writer_of_a_result_refuses_a_fifo(fifo, tmp_path, write):
    """Each way a report or a grid is written refuses a named pipe (and a link to one) and leaves it a pipe."""
    report = Report([SimilarityResult("m", 0.5)])
    grid = Grid([("a", "l")], ["m"], {("m", 0, 0): SimilarityResult("m", 0.5, layer="l->l")})
    if write == "grid.heatmap":  # its format is its file's extension
        fifo = tmp_path / "pipe.png"
        os.mkfifo(fifo)
    target = fifo
    if write == "link":
        target = tmp_path / "link.json"
        os.symlink(fifo, target)
    writers = {"report.to_csv": report.to_csv, "grid.to_json": grid.to_json, "grid.heatmap": grid.heatmap,
               "link": report.to_json}
    with pytest.raises(OSError, match="not a regular file|named pipe"):
        writers[write](str(target))
    assert _still_fifo(fifo)


def test_a_link_to_dev_null_is_refused_not_replaced(tmp_path):
    link = tmp_path / "out.json"
    os.symlink("/dev/null", link)
    before = os.stat("/dev/null")
    assert "character device" in unwritable_reason(link)
    with pytest.raises(OSError, match="character device"):
        with atomic_write(link, "w") as fh:
            fh.write("x")
    after = os.stat("/dev/null")
    assert stat.S_ISCHR(after.st_mode) and after.st_ino == before.st_ino


def test_cli_refuses_a_fifo_output_before_any_work(fifo, tmp_path, capsys):
    x = tmp_path / "x.npy"
    np.save(x, np.random.default_rng(0).standard_normal((20, 3)))
    code = main(["score", str(x), str(x), "--metrics", "cka-linear", "--out", str(fifo)])
    assert code == 2
    assert "named pipe" in capsys.readouterr().err
    assert _still_fifo(fifo)


def test_cli_output_path_is_resolved_before_a_plugin_changes_folder(tmp_path, monkeypatch, capsys):
    import similarity_plugins.runner.score as score_module

    here, elsewhere = tmp_path / "here", tmp_path / "elsewhere"
    here.mkdir()
    elsewhere.mkdir()
    x = here / "x.npy"
    np.save(x, np.random.default_rng(0).standard_normal((20, 3)))
    real = score_module.score

    def chdir_then_score(*args, **kwargs):  # what a plugin calling os.chdir during its metric does
        os.chdir(elsewhere)
        return real(*args, **kwargs)

    monkeypatch.setattr(score_module, "score", chdir_then_score)
    monkeypatch.chdir(here)
    assert main(["score", "x.npy", "x.npy", "--metrics", "cka-linear", "--out", "r.json"]) == 0
    assert json.loads((here / "r.json").read_text())["results"][0]["metric"] == "cka-linear"
    assert not (elsewhere / "r.json").exists()
