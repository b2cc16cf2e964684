"""Runs one Python code block of the docs in a forked child of a preloaded forkserver (tests/docs/test_docs.py).

The forkserver imports torch, NumPy and similarity_plugins once; every block then runs in its own fresh
process forked from that server (never from the test process), as ``python -`` would run it, without paying
the imports again. Nothing a block does reaches the next one.
"""

from __future__ import annotations

import multiprocessing
import os
import sys
import traceback
from pathlib import Path

PRELOAD = ["numpy", "torch", "similarity_plugins"]


def run_python(code: str, cwd: Path, env: dict[str, str], timeout: float) -> tuple[int, str, str]:
    """Run ``code`` as ``__main__`` in a fresh forked process in ``cwd`` with environment ``env``.

    Returns ``(exit code, stdout, stderr)``; a block still running after ``timeout`` seconds is killed
    (exit code -9).
    """
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(PRELOAD)
    out, err = Path(cwd) / ".block-stdout", Path(cwd) / ".block-stderr"
    child = ctx.Process(target=_child, args=(code, str(cwd), env, str(out), str(err)))
    child.start()
    child.join(timeout)
    if child.is_alive():
        child.kill()
        child.join()
    texts = [p.read_text(encoding="utf-8", errors="replace") if p.exists() else "" for p in (out, err)]
    for p in (out, err):
        p.unlink(missing_ok=True)
    return child.exitcode, texts[0], texts[1]


def _child(code: str, cwd: str, env: dict[str, str], out: str, err: str) -> None:
    os.environ.clear()
    os.environ.update(env)
    os.chdir(cwd)
    for fd, path in ((1, out), (2, err)):
        target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(target, fd)
        os.close(target)
    sys.stdout = open(1, "w", closefd=False)
    sys.stderr = open(2, "w", closefd=False)
    sys.argv = ["-"]
    import torch

    torch.set_num_threads(int(env.get("OMP_NUM_THREADS", "1")))
    status = 0
    try:
        exec(compile(code, "<stdin>", "exec"), {"__name__": "__main__", "__builtins__": __builtins__})
    except SystemExit as exc:
        status = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        if not isinstance(exc.code, (int, type(None))):
            print(exc.code, file=sys.stderr)
    except BaseException:
        traceback.print_exc()
        status = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)
