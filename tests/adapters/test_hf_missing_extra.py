"""Without transformers, `hf` and ``hf:`` specs say which extra to install (the CLI exits 2, no traceback)."""

from __future__ import annotations

import subprocess
import sys

import pytest

import similarity_plugins as sp
from similarity_plugins.cli.main import main
from similarity_plugins.utils.extras import MissingExtra

INSTALL = 'pip install "similarity-plugins[hf]"'


@pytest.fixture
def no_transformers(monkeypatch):
    """transformers hidden as if not installed: importing it raises ImportError."""
    monkeypatch.setitem(sys.modules, "transformers", None)


@pytest.mark.parametrize("source", ["EleutherAI/pythia-70m", "."])
def test_hf_names_the_extra(no_transformers, source):
    with pytest.raises(MissingExtra, match=r"hf\(\) needs the transformers package.*" + INSTALL.replace("[", r"\[")):
        sp.hf(source)
    assert issubclass(MissingExtra, ImportError)


@pytest.mark.parametrize("argv", [["layers", "hf:EleutherAI/pythia-70m"],
                                  ["compare", "--front", "hf:a/b", "--end", "hf:a/b", "--layer", "h.0", "--data", "text:"]])
def test_the_command_line_exits_2_with_one_line(no_transformers, argv, capsys, tmp_path):
    if argv[-1] == "text:":
        (tmp_path / "t.txt").write_text("one text\nanother\n", encoding="utf-8")
        argv = argv[:-1] + [f"text:{tmp_path / 't.txt'}"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: the model spec 'hf:") and INSTALL in err and err.count("\n") == 1


@pytest.mark.slow
def test_the_console_script_without_transformers_prints_no_traceback(tmp_path):
    hide = ("import sys; sys.modules['transformers'] = None; from similarity_plugins.cli import console_main; "
            "console_main(['layers', 'hf:EleutherAI/pythia-70m'])")
    done = subprocess.run([sys.executable, "-c", hide], capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert INSTALL in done.stderr and "Traceback" not in done.stderr and done.stdout == ""
