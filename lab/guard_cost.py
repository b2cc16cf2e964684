"""What the donor guard costs on a ResNet-18 (46.8 MB of parameters and buffers): copy vs hash, and the guard itself.

Run: ``OMP_NUM_THREADS=1 python lab/guard_cost.py`` (best of 5 per figure; needs torchvision).
"""

from __future__ import annotations

import hashlib
import time

import torch
import torchvision

from similarity_plugins.runner.guard import DonorGuard


def best(f, k: int = 5) -> float:
    """The fastest of ``k`` runs of ``f()``, in seconds."""
    times = []
    for _ in range(k):
        start = time.perf_counter()
        f()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    torch.set_num_threads(1)
    front, end = torchvision.models.resnet18(), torchvision.models.resnet18()
    tensors = [t.detach() for t in list(front.parameters()) + list(front.buffers())]
    mb = sum(t.numel() * t.element_size() for t in tensors) / 1e6
    copies = [t.clone() for t in tensors]

    def sha256() -> str:
        h = hashlib.sha256()
        for t in tensors:
            h.update(t.contiguous().numpy().tobytes())
        return h.hexdigest()

    clone = best(lambda: [t.clone() for t in tensors])
    equal = best(lambda: all(torch.equal(a, b) for a, b in zip(tensors, copies)))
    digest = best(sha256)
    guard = DonorGuard({"front": front, "end": end})
    snapshot = best(lambda: DonorGuard({"front": front, "end": end}))
    check = best(guard.check)
    print(f"ResNet-18, {mb:.1f} MB: copy {clone * 1e3:.1f} ms, compare with the copy {equal * 1e3:.1f} ms, "
          f"SHA-256 {digest * 1e3:.1f} ms")
    print(f"DonorGuard on two ResNet-18: snapshot {snapshot * 1e3:.1f} ms per compare call, "
          f"check {check * 1e3:.1f} ms per metric call")


if __name__ == "__main__":
    main()
