"""similarity_plugins.utils.io: atomic writes, CSV text and aligned tables."""

from __future__ import annotations

import os

import pytest

from similarity_plugins.utils.io import atomic_write, csv_text, text_table, write_json


def test_atomic_write_replaces_and_leaves_no_temp_file(tmp_path):
    path = tmp_path / "sub" / "out.bin"
    with atomic_write(path) as fh:
        fh.write(b"one")
    with atomic_write(path) as fh:
        fh.write(b"two")
    assert path.read_bytes() == b"two"
    assert os.listdir(path.parent) == ["out.bin"]


def test_failed_write_keeps_the_old_file_and_removes_the_temp(tmp_path):
    path = tmp_path / "report.json"
    write_json(path, {"a": 1})
    with pytest.raises(RuntimeError, match="boom"):
        with atomic_write(path, "w") as fh:
            fh.write("half a file")
            raise RuntimeError("boom")
    assert path.read_text() == '{\n  "a": 1\n}\n'
    assert os.listdir(tmp_path) == ["report.json"]


def test_atomic_write_refuses_append_mode(tmp_path):
    with pytest.raises(ValueError, match="mode must be 'wb' or 'w'"):
        with atomic_write(tmp_path / "x", "ab"):
            pass


def test_csv_text_and_text_table():
    text = csv_text(["name", "score"], [["a,b", 0.5], ["c", None]])
    assert text == 'name,score\n"a,b",0.5\nc,\n'
    table = text_table(["metric", "layer", "score"], [["cka", "block1", "0.50"], ["stitch-slm", "b2", "1"]], left=2)
    assert table.splitlines() == [
        "metric      layer   score",
        "----------  ------  -----",
        "cka         block1   0.50",
        "stitch-slm  b2          1",
    ]
