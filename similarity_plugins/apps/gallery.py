"""IRIs you can see: seeds next to their identically represented inputs, with each IRI's quality."""

from __future__ import annotations

import os
from typing import Any, Mapping

import torch

from ..iri.result import IRISet


def gallery_captions(iris: IRISet, count: int) -> list[str]:
    """Captions of the first ``count`` IRIs: relative error ``||f(x')-f(x)||/||f(x)||`` and RMS pixel distance."""
    n = min(count, len(iris))
    return [f"err {float(iris.rel_error[i]):.3f}\ndist {float(iris.seed_distance[i]):.3f}" for i in range(n)]


def _image(x: torch.Tensor) -> Any:
    """(C, H, W) in [0, 1] -> an array matplotlib shows: (H, W) grey for one channel, (H, W, 3) otherwise."""
    x = x.detach().float().cpu().clamp(0, 1)
    return x[0].numpy() if x.shape[0] == 1 else x[:3].permute(1, 2, 0).numpy()


def plot_iris(iris: IRISet | Mapping[str, IRISet], seeds: torch.Tensor, path: str | os.PathLike, *, count: int = 8,
              title: str | None = None) -> str:
    """Write the PNG gallery of `iris_figure` to ``path`` atomically (parent folders created; a new file gets
    the umask's permissions); returns the path."""
    from ..utils.io import write_all

    path = os.fspath(path)
    write_all({path: iris_figure(iris, seeds, count=count, title=title)})
    return path


def iris_figure(iris: IRISet | Mapping[str, IRISet], seeds: torch.Tensor, *, count: int = 8, title: str | None = None,
                fmt: str = "png") -> bytes:
    """The gallery image (``fmt``, 110 dpi): the first ``count`` seeds on the top row, their IRIs below (one row
    per layer). Returns the file contents (bytes), for writing with other files all or none.

    - ``iris``: one [`IRISet`][IRISet], or a mapping ``{layer: IRISet}`` for a layer sweep (same seeds,
      same order); ``seeds``: the (N, C, H, W) inputs the IRIs started from, values in [0, 1].
    - Each IRI's caption gives its relative error and its RMS distance from its seed (pixel units),
      read from the IRISet; each row's label the layer and median error.
    """
    from ..utils.figures import figure_bytes, pyplot

    plt = pyplot()
    rows = dict(iris) if isinstance(iris, Mapping) else {"IRIs": iris}
    if not rows:
        raise ValueError("plot_iris needs at least one IRISet")
    n = min([count, len(seeds)] + [len(s) for s in rows.values()])
    if n < 1:
        raise ValueError("plot_iris needs at least one seed and one IRI")
    for name, s in rows.items():
        if tuple(s.inputs.shape[1:]) != tuple(seeds.shape[1:]):
            raise ValueError(f"IRIs of {name!r} have shape {tuple(s.inputs.shape[1:])} but the seeds {tuple(seeds.shape[1:])}")
    fig, axes = plt.subplots(1 + len(rows), n, figsize=(1.25 * n + 1.2, 1.65 * (1 + len(rows))), squeeze=False)
    for j in range(n):
        axes[0][j].imshow(_image(seeds[j]), cmap="gray", vmin=0, vmax=1)
    axes[0][0].set_ylabel("seeds", fontsize=8)
    for i, (name, s) in enumerate(rows.items(), start=1):
        for j, caption in enumerate(gallery_captions(s, n)):
            axes[i][j].imshow(_image(s.inputs[j]), cmap="gray", vmin=0, vmax=1)
            axes[i][j].set_xlabel(caption, fontsize=6.5, labelpad=1)
        axes[i][0].set_ylabel(f"{name}\nmedian err\n{float(s.rel_error.median()):.3f}", fontsize=7)
    for ax in axes.flat:
        ax.set_xticks([])
        ax.set_yticks([])
    fig.suptitle(title or "seeds (top) and their IRIs: relative error, RMS distance from seed", fontsize=9)
    fig.tight_layout()
    return figure_bytes(fig, fmt, dpi=110)


def iris_of_sweep(context: Any, front: torch.nn.Module, layers: list[str], options: dict) -> tuple[dict, torch.Tensor]:
    """The IRISets a ``compare`` with ``context`` made for ``front`` at ``layers`` (memoised, so no new work when
    the IRI metrics ran with the same ``options``), and their seeds: ``({layer: IRISet}, seeds (N, C, H, W))``."""
    from ..iri.service import iri_settings, iri_training_set, training_seeds

    sets = {layer: iri_training_set(context, front, layer, options)[1] for layer in layers}
    seeds, _ = training_seeds(context, iri_settings(options)["iri_max_seeds"])
    return sets, seeds
