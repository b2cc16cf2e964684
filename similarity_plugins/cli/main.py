"""The ``similarity-plugins`` parser and entry point; each command lives in its own module with a
``register(subparsers)`` function, listed in `COMMAND_MODULES` in the order ``--help`` shows them."""

from __future__ import annotations

import argparse
import os
import sys
from typing import NoReturn, Sequence

from .. import __version__
from ..utils.extras import MissingExtra
from ..utils.text import command_line
from . import bench, catalog, compare, demo, grid, iris, report, score, store, study, train
from .arguments import add_progress_args
from .interrupts import Terminated, interrupted_code, terminate_as_interrupt

COMMAND_MODULES = (catalog, compare, grid, score, store, report, train, iris, demo, bench, study)

EPILOG = """MODEL specs: torchvision:NAME, timm:NAME (keyword arguments after ?, e.g.
timm:vit_tiny_patch16_224?img_size=32&patch_size=4), python:module:callable or small-cnn, each
optionally followed by @weights.pt (loaded with torch.load(weights_only=True)); hf:ID[@REVISION] (a
Hugging Face hub id or save_pretrained folder, e.g. hf:EleutherAI/pythia-70m@step3000?pooling=last).
DATA specs: digits (built in), cifar10:ROOT, folder:ROOT (ImageFolder with train/ and test/),
text:[TRAIN_FILE,]TEST_FILE (one text a line), pairs:IMAGES_DIR,CAPTIONS_FILE[,SIZE] (images and their
captions; four paths: a train split first). similarity-plugins COMMAND --help lists its flags."""


def build_parser() -> argparse.ArgumentParser:
    """The argparse parser of the ``similarity-plugins`` command."""
    parser = argparse.ArgumentParser(
        prog="similarity-plugins",
        description="Do two trained networks compute the same function? CKA, model stitching and "
        "invariance-aware stitching side by side.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    for module in COMMAND_MODULES:
        module.register(sub)
    for command in sub.choices.values():  # every command takes --progress / --no-progress (arguments.progress_of)
        add_progress_args(command)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``similarity-plugins`` console script. Returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    from ..distributed.world import default_device, finish, init_from_env

    started = init_from_env()  # under torchrun: gloo on CPU, NCCL on cuda:LOCAL_RANK (docs/scale_out.md)
    if started:
        if getattr(args, "device", "") is None:
            args.device = default_device()
        import torch

        torch.manual_seed(int(getattr(args, "seed", 0) or 0))  # the same untrained models on every rank
    try:
        with terminate_as_interrupt(), command_line():  # messages name commands (utils.text.how_to)
            return int(args.func(args) or 0)
    except BrokenPipeError:  # the reader left (``| head -1``): the files were written before the table
        _silence_stdout()
        return 141
    except MissingExtra as exc:  # an optional dependency: one line with the pip command
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # unreadable or unwritable paths: one line naming the path, no traceback
        print(f"error: {os_error_line(exc)}", file=sys.stderr)
        return 2
    except (ValueError, TypeError, FileNotFoundError, KeyError, RuntimeError) as exc:
        message = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
        print(f"error: {message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as exc:
        print("terminated" if isinstance(exc, Terminated) else "interrupted", file=sys.stderr)
        return interrupted_code(exc)
    finally:
        if started:
            finish()


def _silence_stdout() -> None:
    """Point stdout at the null device, so that Python's final flush does not fail again on the closed pipe."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # no real file descriptor (a test's stand-in): nothing to flush
        pass


def os_error_line(exc: OSError) -> str:
    """One line for an ``OSError``: the path(s) it names and the reason (``cannot use 'out.json': Permission
    denied``), or its text when it names no path."""
    if exc.filename is None:
        return str(exc) or type(exc).__name__
    paths = repr(exc.filename) + (f" -> {exc.filename2!r}" if exc.filename2 else "")
    return f"cannot use {paths}: {exc.strerror or exc}"


def console_main(argv: Sequence[str] | None = None) -> NoReturn:
    """Entry point of the console script and of ``python -m similarity_plugins``: exit with ``main``'s code.

    Under torchrun, and wherever a timed-out metric's thread is still running, the process ends through
    `end_rank_process` once ``main`` has written its outputs (no Python finalisation, where a native thread
    aborts the process with SIGABRT instead of the documented code; docs/scale_out.md, docs/reliability.md).
    Elsewhere it raises ``SystemExit``.
    """
    from ..distributed.world import end_rank_process, launched_by_torchrun
    from ..runner.isolation import abandoned_threads

    try:
        code = main(argv)
    except SystemExit as exc:  # --help, argparse errors: the code Python would exit with
        if not (launched_by_torchrun() or abandoned_threads()):
            raise
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        if not isinstance(exc.code, (int, type(None))):
            print(exc.code, file=sys.stderr)  # what Python prints for SystemExit("message")
    if launched_by_torchrun() or abandoned_threads():
        end_rank_process(code)
    raise SystemExit(code)
