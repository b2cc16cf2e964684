"""The working batch's per-slot state: torch tensors on the compute device and host NumPy vectors.

Slot ``i`` holds one sample. Every field is indexed by slot first, so moving a sample between slots
(``move``) and checkpointing the active slots (``state`` / ``load_state``) are generic over fields.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch


class Work:
    """Per-slot state of the working batch.

    ``tensors``: name -> trailing shape, allocated as (capacity, *shape) zeros on ``device``;
    ``host``: name -> (NumPy dtype, fill value), allocated as (capacity,) vectors. Fields are attributes.
    """

    def __init__(self, capacity: int, tensors: dict[str, tuple[int, ...]], host: dict[str, tuple[Any, Any]],
                 device: torch.device, dtype: torch.dtype) -> None:
        self.tensor_names = tuple(tensors)
        self.host_names = tuple(host)
        for name, shape in tensors.items():
            setattr(self, name, torch.zeros(capacity, *shape, device=device, dtype=dtype))
        for name, (np_dtype, fill) in host.items():
            setattr(self, name, np.full(capacity, fill, dtype=np_dtype))
        self.device = device
        self.active = 0

    def move(self, src: np.ndarray, dst: np.ndarray) -> None:
        """Copy slots ``src`` into slots ``dst`` (used to keep active slots contiguous)."""
        if len(src) == 0:
            return
        s = torch.as_tensor(src, device=self.device)
        d = torch.as_tensor(dst, device=self.device)
        for name in self.tensor_names:
            t = getattr(self, name)
            t[d] = t[s]
        for name in self.host_names:
            a = getattr(self, name)
            a[dst] = a[src]

    def state(self) -> dict[str, Any]:
        """The active slots' state as CPU tensors (for a checkpoint)."""
        k = self.active
        out: dict[str, Any] = {"active": k}
        for name in self.tensor_names:
            out[name] = getattr(self, name)[:k].detach().cpu().clone()
        for name in self.host_names:
            out[name] = torch.from_numpy(getattr(self, name)[:k].copy())
        return out

    def load_state(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`state` saved (same fields; capacity at least the saved active count)."""
        k = int(state["active"])
        self.active = k
        for name in self.tensor_names:
            t = getattr(self, name)
            t[:k] = state[name].to(t.device, t.dtype)
        for name in self.host_names:
            getattr(self, name)[:k] = state[name].numpy()
