"""CI runs the README's quick start, not a cousin of it: `.ci/run` reads the two commands from README.md and runs
each exactly as written in a new virtual environment."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.repo import ROOT, load_repo_module

CI = ROOT / ".ci" / "run"


def readme_quick_start(readme: Path) -> list[str]:
    """The quick start's bash blocks as a reader sees them: every non-comment line, in order (read here
    independently of .ci/readme_commands.py, so a bug there shows)."""
    section = readme.read_text(encoding="utf-8").split("## Quick start", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```bash\n(.*?)```", section, re.S)
    return [line.strip() for block in blocks for line in block.splitlines()
            if line.strip() and not line.strip().startswith("#")]


def ci_plan(repo: Path) -> dict[str, str]:
    """What `.ci/run` in ``repo`` would run for the README's two commands (its CI_PLAN_ONLY mode)."""
    env = {**os.environ, "CI_PLAN_ONLY": "1"}
    done = subprocess.run(["bash", str(repo / ".ci" / "run")], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    return dict(line.split(": ", 1) for line in done.stdout.splitlines())


def test_ci_runs_exactly_the_readme_quick_start_commands():
    plan = ci_plan(ROOT)
    assert sorted(plan.values()) == sorted(readme_quick_start(ROOT / "README.md"))
    assert "similarity-plugins demo" in plan["demo"] and plan["tests"].endswith("python -m pytest")
    assert plan["tests"].startswith('python -m pip install -e ".[test]"')  # the test extra alone, nothing more


def test_a_change_to_the_readme_changes_what_ci_runs(tmp_path):
    (tmp_path / ".ci").mkdir()
    for name in ("run", "readme_commands.py"):
        shutil.copy(ROOT / ".ci" / name, tmp_path / ".ci" / name)
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    changed = readme.replace('python -m pip install -e ".[test]" && python -m pytest',
                             'python -m pip install -e ".[test]" && python -m pytest -x', 1)
    assert changed != readme
    (tmp_path / "README.md").write_text(changed, encoding="utf-8")
    assert ci_plan(tmp_path)["tests"].endswith("python -m pytest -x")
    (tmp_path / "README.md").write_text(changed.replace("## Quick start", "## Start"), encoding="utf-8")
    env = {**os.environ, "CI_PLAN_ONLY": "1"}
    done = subprocess.run(["bash", str(tmp_path / ".ci" / "run")], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode != 0 and "Quick start" in done.stderr  # a README without the commands stops CI


def test_each_readme_command_runs_in_a_new_virtual_environment():
    """The commands run through run_in_new_env (a `python -m venv` of its own, no system site-packages), the
    demo's in one environment and the tests' in another, before anything else installs into them."""
    script = CI.read_text(encoding="utf-8")
    body = script.split("run_in_new_env() {", 1)[1].split("\n}", 1)[0]
    assert re.search(r'python -m venv "\$ENVS/\$1"', body) and "system-site-packages" not in script
    assert 'bash -euo pipefail -c "$2"' in body
    runs = re.findall(r"^run_in_new_env (\w+) (\S+)$", script, re.M)
    assert runs == [("demo", '"$DEMO_COMMAND"'), ("tests", '"$TEST_COMMAND"')]
    first_install = script.index("pip install -e")
    assert first_install > script.index('run_in_new_env tests "$TEST_COMMAND"')  # extras only after the README's


@pytest.mark.parametrize("kind", ["demo", "test"])
def test_the_readme_command_helper_refuses_what_it_cannot_read(tmp_path, kind):
    (tmp_path / ".ci").mkdir()
    shutil.copy(ROOT / ".ci" / "readme_commands.py", tmp_path / ".ci")
    (tmp_path / "README.md").write_text("# x\n\n## Quick start\n\n```bash\npip install x\nsimilarity-plugins demo\n```\n")
    done = subprocess.run([sys.executable, str(tmp_path / ".ci" / "readme_commands.py"), kind], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode != 0 and "one command" in done.stderr


def test_ci_fails_on_code_over_the_size_budget(tmp_path, monkeypatch, capsys):
    """`.ci/run` runs scripts/code_size.py as a plain step (set -e: its exit status 1 stops CI), and the script
    exits 1 when a module or a function is over its budget, 0 when none is."""
    script = CI.read_text(encoding="utf-8")
    assert re.search(r"^python scripts/code_size\.py$", script, re.M) and script.startswith("#!/usr/bin/env bash")
    assert "set -euo pipefail" in script
    code_size = load_repo_module("scripts/code_size.py", "code_size_for_test")
    package = tmp_path / "similarity_plugins"
    package.mkdir()
    (package / "long.py").write_text("def f():\n    a = 1\n    b = 2\n    return a + b\n", encoding="utf-8")
    monkeypatch.setattr(code_size, "PACKAGE", package)
    assert code_size.main(["--max-module", "10", "--max-function", "3"]) == 1
    assert "function similarity_plugins/long.py:1 f: 4 lines" in capsys.readouterr().out
    assert code_size.main(["--max-module", "10", "--max-function", "4"]) == 0
    # a docstring is not counted: the same body under a three-line docstring is still 4 lines
    (package / "long.py").write_text('def f():\n    """One.\n\n    Two."""\n    a = 1\n    b = 2\n    return a + b\n',
                                     encoding="utf-8")
    assert code_size.main(["--max-module", "10", "--max-function", "4"]) == 0
    assert code_size.main(["--max-module", "10", "--max-function", "3"]) == 1


def test_ci_installs_chromium_when_missing_and_requires_the_browser_checks():
    """The HTML report's browser tests (slow) must run in CI: `.ci/run` installs Debian's chromium when it is
    missing, before any test, and sets SP_REQUIRE_BROWSER=1 so that a missing browser fails them instead of
    skipping; the demo's page is checked with its JSON."""
    script = CI.read_text(encoding="utf-8")
    install = script.index("apt-get install -y chromium")
    assert script.index("if ! command -v chromium") < install < script.index('run_in_new_env demo "$DEMO_COMMAND"')
    assert re.search(r"^export SP_REQUIRE_BROWSER=1", script, re.M)
    assert 'test -s "$REPO/similarity-demo/report.html"' in script
