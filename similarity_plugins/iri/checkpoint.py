"""Checkpoints of a running optimisation: the full state, saved atomically, resumed bit-identically."""

from __future__ import annotations

import os
import warnings
from typing import Any

import torch

CHECKPOINT_VERSION = 3   # 3: L-BFGS histories are rings (hvalid, gamma)


def save_checkpoint(run: Any) -> None:
    """Save ``run``'s full state (slots, outputs, counters) atomically to ``run.checkpoint_path``."""
    from .cache import atomic_save

    state = {
        "version": CHECKPOINT_VERSION, "settings": run.s.as_dict(), "n": run.n, "offset": run.offset, "capacity": run.capacity,
        "work": run.w.state(), "next_pending": run.next_pending, "finished": run.finished, "step": run.step,
        "out_x": run.out_x.detach().cpu(), "out_err": torch.from_numpy(run.out_err.copy()),
        "out_steps": torch.from_numpy(run.out_steps.copy()), "evals": run.evals,
        "restarts": run.stepper.restarts, "rejected": getattr(run.stepper, "rejected", 0),
        "phases": getattr(run.stepper, "phases", 0),
    }
    atomic_save(state, run.checkpoint_path, "iri-checkpoint")


def resume(run: Any) -> bool:
    """Load ``run.checkpoint_path`` into ``run`` if it exists and belongs to the same run; True if resumed."""
    if run.checkpoint_path is None or not os.path.exists(run.checkpoint_path):
        return False
    from .cache import load_file

    state = load_file(run.checkpoint_path, "iri-checkpoint")   # a damaged file: None, warned "corrupt"
    if state is None:
        return False
    if (state.get("version") != CHECKPOINT_VERSION or state.get("settings") != run.s.as_dict()
            or state.get("n") != run.n or state.get("offset", 0) != run.offset):
        warnings.warn(f"ignoring checkpoint {run.checkpoint_path}: it belongs to another run", stacklevel=4)
        return False
    if state["capacity"] != run.capacity:
        warnings.warn(f"resuming with the checkpoint's batch size {state['capacity']} (asked {run.capacity})",
                      stacklevel=4)
        run.capacity = int(state["capacity"])
        run.alloc()
    run.w.load_state(state["work"])
    run.next_pending, run.finished, run.step = state["next_pending"], state["finished"], state["step"]
    run.evals = state.get("evals", 0)
    run.stepper.restarts = state.get("restarts", 0)
    if hasattr(run.stepper, "rejected"):
        run.stepper.rejected = state.get("rejected", 0)
        run.stepper.phases = state.get("phases", 0)
    run.out_x.copy_(state["out_x"].to(run.out_x.device, run.out_x.dtype))
    run.out_err[:] = state["out_err"].numpy()
    run.out_steps[:] = state["out_steps"].numpy()
    return True
