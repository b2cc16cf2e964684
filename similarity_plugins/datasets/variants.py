"""Dataset variants that plant, remove or scramble label-coded cues, for the "different cues" and
"unseen predictive information" experiments.

Every variant wraps any dataset of ``(x, y)`` pairs with ``x`` (C, H, W) float in [0, 1], keeps its length,
and is deterministic given its seed. When the wrapped dataset holds its tensors in memory (``.tensors`` or
``.x``/``.y``, e.g. `similarity_plugins.datasets.digits`) the variant computes all its images at once on
first access of ``.tensors``/``.x``/``.y`` and caches them; otherwise those are ``None`` and samples are
built one at a time in ``__getitem__``. Variants compose (a variant is itself such a dataset).

- `PixelShortcut`: a small square of value 1.0 whose position codes the label (a pixel shortcut,
  by default on the left/right edges, clear of a centred object);
  with ``swap_fraction`` part of the images are replaced by images of other classes while the square still
  follows the label, so the square is the only cue that is always right.
- `ShortcutRemoved`: the clean images (no square), to measure what a model reads without it.
- `ShortcutRandomised`: the clean images stamped with the square of a random wrong class.
- `UnseenCue`: a different kind of label-correlated cue (a faint border frame whose intensity /
  colour codes the label), present only where you put it (e.g. the stitch's training data).
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch.utils.data import Dataset

from ..utils.text import did_you_mean
from .tensors import num_classes_of, tensors_of


def _labels_of(dataset: Any) -> torch.Tensor:
    """All labels of ``dataset`` as an (N,) int64 tensor, cheaply when the dataset exposes them."""
    t = tensors_of(dataset)
    if t is not None:
        return t[1].long().cpu()
    if isinstance(dataset, _Variant):
        return dataset.labels
    targets = getattr(dataset, "targets", None)
    if targets is not None and len(targets) == len(dataset):
        return torch.as_tensor(targets, dtype=torch.long)
    return torch.as_tensor([int(dataset[i][1]) for i in range(len(dataset))], dtype=torch.long)


class _Variant(Dataset):
    """Common machinery: ``source_index[i]`` picks the base image for sample ``i``; ``_transform`` edits a batch."""

    def __init__(self, base: Dataset, num_classes: int | None = None) -> None:
        self.base = base
        n = len(base)  # type: ignore[arg-type]
        if n == 0:
            raise ValueError("cannot build a variant of an empty dataset")
        self.labels = _labels_of(base)
        self.num_classes = int(num_classes if num_classes is not None else num_classes_of(base, 10))
        if int(self.labels.max()) >= self.num_classes or int(self.labels.min()) < 0:
            raise ValueError(
                f"labels run from {int(self.labels.min())} to {int(self.labels.max())} but num_classes="
                f"{self.num_classes}; pass the dataset's true number of classes"
            )
        self.source_index = torch.arange(n)
        self.image_shape = tuple(torch.as_tensor(base[0][0]).shape)  # (C, H, W)
        if len(self.image_shape) != 3:
            raise ValueError(f"variants need image samples shaped (C, H, W); got {self.image_shape}")
        self._cache: tuple[torch.Tensor, torch.Tensor] | None = None

    def _transform(self, index: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Edit a batch: ``index`` (B,) sample indices, ``x`` (B, C, H, W) base images, ``y`` (B,) labels."""
        return x

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self._cache is None and tensors_of(self.base) is not None:
            self.tensors  # in-memory base: build every sample once, vectorised, then index
        if self._cache is not None:
            return self._cache[0][i], self._cache[1][i]
        i = int(i)
        x = torch.as_tensor(self.base[int(self.source_index[i])][0])
        y = self.labels[i]
        out = self._transform(torch.tensor([i]), x.unsqueeze(0).clone(), y.view(1))
        return out[0], y

    @property
    def tensors(self) -> tuple[torch.Tensor, torch.Tensor] | None:
        """``(x, y)`` for the whole variant when the base holds tensors in memory (computed once), else None."""
        if self._cache is None:
            base = tensors_of(self.base)
            if base is None:
                return None
            x = base[0][self.source_index].clone()
            self._cache = (self._transform(torch.arange(len(self)), x, self.labels).contiguous(), self.labels.clone())
        return self._cache

    @property
    def x(self) -> torch.Tensor | None:
        t = self.tensors
        return None if t is None else t[0]

    @property
    def y(self) -> torch.Tensor | None:
        t = self.tensors
        return None if t is None else t[1]

    def __repr__(self) -> str:
        return f"{type(self).__name__}(n={len(self)}, base={type(self.base).__name__})"


class PatchPattern:
    """Where the label-coded square of each class goes, for images of ``height`` x ``width`` pixels.

    - ``layout="edges"`` (default): the squares touch the left and right edges of the image, classes
      ``0..ceil(K/2)-1`` down the left edge and the rest down the right edge, evenly spaced. On centred
      objects (digits, most photos) they rarely cover the object, so a shape reader is barely disturbed.
    - ``layout="grid"``: class ``k`` owns cell ``k`` of a ``g x g`` grid (g = ceil(sqrt(K))) and its square
      sits at the centre of that cell (squares may cover the object).

    ``patch`` (side in pixels) defaults to ``min(H, W) // 8`` (4 at 32x32), shrunk if needed so the squares
    do not touch. The geometry depends only on these arguments (never on a seed), so the train and test
    variants of a dataset carry the same patterns. ``masks`` is (K, H, W) bool; ``positions[k]`` the
    (row, col) of the top-left pixel of class ``k``'s square.
    """

    def __init__(self, height: int, width: int, num_classes: int, patch: int | None = None, value: float = 1.0,
                 layout: str = "edges") -> None:
        if num_classes < 1:
            raise ValueError(f"num_classes must be >= 1, got {num_classes}")
        if layout == "edges":
            per_side = math.ceil(num_classes / 2)
            room = height // per_side  # rows available to each square and its gap
            limit = min(room, width // 2)  # squares never overlap
            gap_limit = min(max(room - 1, 1) if per_side > 1 else room, width // 2)  # ...and keep a gap if possible
            default = min(max(1, min(height, width) // 8), gap_limit)
        elif layout == "grid":
            g = math.ceil(math.sqrt(num_classes))
            cell_h, cell_w = height // g, width // g
            limit = min(cell_h, cell_w)
            default = max(1, limit // 2)
        else:
            raise ValueError(f"unknown layout {layout!r}; use 'edges' or 'grid'")
        if limit < 1:
            raise ValueError(f"images of {height}x{width} are too small for {num_classes} class patterns "
                             f"in the {layout!r} layout")
        patch = default if patch is None else int(patch)
        if not 1 <= patch <= limit:
            raise ValueError(f"patch={patch} does not fit {num_classes} class squares on {height}x{width} images "
                             f"in the {layout!r} layout; use a patch between 1 and {limit}")
        self.patch, self.value, self.num_classes, self.layout = patch, float(value), int(num_classes), layout
        self.positions: list[tuple[int, int]] = []
        masks = torch.zeros(num_classes, height, width, dtype=torch.bool)
        for k in range(num_classes):
            if layout == "edges":
                side, slot = divmod(k, per_side)
                count = per_side if side == 0 else num_classes - per_side
                r = round(slot * (height - patch) / max(count - 1, 1)) if count > 1 else (height - patch) // 2
                c = 0 if side == 0 else width - patch
            else:
                r = (k // g) * cell_h + (cell_h - patch) // 2
                c = (k % g) * cell_w + (cell_w - patch) // 2
            self.positions.append((r, c))
            masks[k, r:r + patch, c:c + patch] = True
        self.masks = masks  # (K, H, W) bool

    def mask_for(self, label: int) -> torch.Tensor:
        """(H, W) bool mask of the pixels the pattern of class ``label`` sets to ``value``."""
        return self.masks[int(label)]

    def stamp(self, x: torch.Tensor, labels: torch.Tensor, where: torch.Tensor | None = None) -> torch.Tensor:
        """Stamp the pattern of ``labels`` (B,) on ``x`` (B, C, H, W), only on rows where ``where`` (B,) is True."""
        m = self.masks[labels.long().cpu()].to(x.device)  # (B, H, W)
        if where is not None:
            m = m & where.to(x.device).view(-1, 1, 1)
        return torch.where(m.unsqueeze(1), torch.as_tensor(self.value, dtype=x.dtype, device=x.device), x)


def _pick_other_class(labels: torch.Tensor, rows: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """For each index in ``rows``, a uniformly random index of the dataset whose label differs."""
    n = len(labels)
    order = torch.argsort(labels, stable=True)
    k = int(labels.max()) + 1
    counts = torch.bincount(labels, minlength=k)
    starts = torch.cumsum(counts, 0) - counts
    own = labels[rows]
    pool = n - counts[own]
    if bool((pool == 0).any()):
        raise ValueError("swap_fraction > 0 needs at least two classes in the dataset")
    r = (torch.rand(len(rows), generator=gen, dtype=torch.float64) * pool).long().clamp_max(pool - 1)
    pos = torch.where(r < starts[own], r, r + counts[own])
    return order[pos]


class PixelShortcut(_Variant):
    """Stamp a label-coded square (see `PatchPattern`) on a ``fraction`` of the samples.

    ``swap_fraction`` (at most ``fraction``) of the samples get the image of a random sample of another
    class while keeping their label and the square of that label, so the square is the only cue that is
    always right. Labels never change. Which samples are stamped/swapped is fixed by ``seed``.

    Attributes: ``stamped`` and ``swapped`` (N,) bool, ``source_index`` (N,) the base image each sample
    shows, ``pattern`` the `PatchPattern`, ``labels`` (N,) int64.
    """

    def __init__(self, dataset: Dataset, num_classes: int | None = None, fraction: float = 1.0,
                 swap_fraction: float = 0.0, patch: int | None = None, value: float = 1.0, seed: int = 0,
                 layout: str = "edges") -> None:
        super().__init__(dataset, num_classes)
        if not 0.0 <= fraction <= 1.0:
            raise ValueError(f"fraction must be in [0, 1], got {fraction}")
        if not 0.0 <= swap_fraction <= fraction:
            raise ValueError(
                f"swap_fraction must be in [0, fraction={fraction}] (swapped samples carry the pattern), "
                f"got {swap_fraction}"
            )
        n = len(self)
        self.fraction, self.swap_fraction, self.seed = float(fraction), float(swap_fraction), int(seed)
        self.pattern = PatchPattern(self.image_shape[1], self.image_shape[2], self.num_classes, patch, value, layout)
        gen = torch.Generator().manual_seed(int(seed))
        perm = torch.randperm(n, generator=gen)
        n_stamp, n_swap = round(fraction * n), round(swap_fraction * n)
        self.stamped = torch.zeros(n, dtype=torch.bool)
        self.stamped[perm[:n_stamp]] = True
        self.swapped = torch.zeros(n, dtype=torch.bool)
        self.swapped[perm[:n_swap]] = True
        if n_swap:
            rows = perm[:n_swap]
            self.source_index[rows] = _pick_other_class(self.labels, rows, gen)

    def pattern_for(self, label: int) -> torch.Tensor:
        """(H, W) bool mask of the pixels set to ``pattern.value`` (1.0) on samples of class ``label``."""
        return self.pattern.mask_for(label)

    def _transform(self, index: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return self.pattern.stamp(x, y, self.stamped[index])


def _clean_base(dataset: Dataset) -> Dataset:
    """The images under a `PixelShortcut` (unstamped, unswapped); any other dataset as it is."""
    return dataset.base if isinstance(dataset, PixelShortcut) else dataset


class ShortcutRemoved(_Variant):
    """The clean images: for a `PixelShortcut`, the images it wraps (no square, no swaps, true labels);
    for any other dataset, that dataset unchanged. Evaluate on it to see what a model reads without the cue."""

    def __init__(self, dataset: Dataset, num_classes: int | None = None) -> None:
        if num_classes is None and isinstance(dataset, _Variant):
            num_classes = dataset.num_classes
        super().__init__(_clean_base(dataset), num_classes)


class _Marked(_Variant):
    """The clean images stamped with the square of class ``stamped_labels[i]`` (N,), drawn by ``_draw`` from ``seed``.

    Given a `PixelShortcut`, reuses its pattern geometry and its clean images; otherwise builds the default
    `PatchPattern` (same as ``PixelShortcut`` with the same ``patch``/``value``/``layout``).
    """

    def __init__(self, dataset: Dataset, num_classes: int | None = None, seed: int = 0,
                 patch: int | None = None, value: float = 1.0, layout: str = "edges") -> None:
        pattern = dataset.pattern if isinstance(dataset, PixelShortcut) else None
        if num_classes is None and isinstance(dataset, _Variant):
            num_classes = dataset.num_classes
        super().__init__(_clean_base(dataset), num_classes)
        self._check_classes()
        self.pattern = pattern or PatchPattern(self.image_shape[1], self.image_shape[2], self.num_classes, patch, value,
                                              layout)
        self.stamped_labels = self._draw(torch.Generator().manual_seed(int(seed)))

    def _check_classes(self) -> None:
        """Raise ``ValueError`` when the variant cannot be drawn for ``num_classes`` classes."""

    def _draw(self, gen: torch.Generator) -> torch.Tensor:
        """(N,) int64: the class whose square each sample carries."""
        raise NotImplementedError

    def pattern_for(self, label: int) -> torch.Tensor:
        """(H, W) bool mask of the square of class ``label``."""
        return self.pattern.mask_for(label)

    def _transform(self, index: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return self.pattern.stamp(x, self.stamped_labels[index])


class ShortcutRandomised(_Marked):
    """The clean images stamped with the square of a random *wrong* class (``stamped_labels[i] != y[i]``).

    Given a `PixelShortcut`, reuses its pattern geometry and its clean images; otherwise builds the
    default `PatchPattern` (same as ``PixelShortcut`` with the same ``patch``/``value``). A model that
    relies on the square follows it to the wrong class; a shape reader is barely affected.
    """

    def _check_classes(self) -> None:
        if self.num_classes < 2:
            raise ValueError("a wrong class needs num_classes >= 2")

    def _draw(self, gen: torch.Generator) -> torch.Tensor:
        shift = torch.randint(1, self.num_classes, (len(self),), generator=gen)
        return (self.labels + shift) % self.num_classes


class UnseenCue(_Variant):
    """A faint label-coded border frame: every pixel within ``width`` of the edge is set to a per-class value.

    One channel: class ``k`` gets intensity ``strength * (k + 1) / K``; several channels: a per-class colour
    (uniform in [0, 1]^C from ``palette_seed``) times ``strength``. The look of the cue depends only on the
    image shape, ``num_classes``, ``strength``, ``width`` and ``palette_seed``; ``seed`` only picks which
    ``fraction`` of samples carry it. ``.cue_for(label)`` gives the (C, H, W) values and ``.mask`` (H, W) the frame.
    """

    def __init__(self, dataset: Dataset, num_classes: int | None = None, strength: float = 0.5,
                 width: int | None = None, fraction: float = 1.0, seed: int = 0, palette_seed: int = 0) -> None:
        super().__init__(dataset, num_classes)
        c, h, w = self.image_shape
        if not 0.0 < strength <= 1.0:
            raise ValueError(f"strength must be in (0, 1], got {strength}")
        if not 0.0 <= fraction <= 1.0:
            raise ValueError(f"fraction must be in [0, 1], got {fraction}")
        width = max(1, min(h, w) // 16) if width is None else int(width)
        if not 1 <= width <= min(h, w) // 2:
            raise ValueError(f"width must be between 1 and {min(h, w) // 2} pixels for {h}x{w} images, got {width}")
        self.strength, self.width, self.fraction = float(strength), width, float(fraction)
        mask = torch.ones(h, w, dtype=torch.bool)
        mask[width:h - width, width:w - width] = False
        self.mask = mask
        k = self.num_classes
        if c == 1:
            colours = (torch.arange(k, dtype=torch.float32) + 1).div(k).view(k, 1)
        else:
            colours = torch.rand(k, c, generator=torch.Generator().manual_seed(int(palette_seed)))
        self.colours = colours * self.strength  # (K, C)
        gen = torch.Generator().manual_seed(int(seed))
        self.has_cue = torch.zeros(len(self), dtype=torch.bool)
        self.has_cue[torch.randperm(len(self), generator=gen)[:round(fraction * len(self))]] = True

    def cue_for(self, label: int) -> torch.Tensor:
        """(C, H, W) image of the cue of class ``label`` (zero outside `mask`)."""
        return self.colours[int(label)].view(-1, 1, 1) * self.mask

    def _transform(self, index: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        m = (self.mask.view(1, 1, *self.mask.shape) & self.has_cue[index].view(-1, 1, 1, 1)).to(x.device)
        colour = self.colours[y.long().cpu()].to(x.device, x.dtype).view(len(y), -1, 1, 1)
        return torch.where(m, colour, x)


class RandomMark(_Marked):
    """The clean images stamped with the square of a uniformly random class (any class, the own one too).

    The mark is present but carries no information about the label, so a model trained on it learns to
    ignore it: the "clean" donor of a shortcut study that is not disturbed by marks at test time.
    Given a `PixelShortcut`, reuses its pattern geometry and clean images. ``stamped_labels`` (N,)
    is the class whose square each sample carries; fixed by ``seed``.
    """

    def _draw(self, gen: torch.Generator) -> torch.Tensor:
        return torch.randint(0, self.num_classes, (len(self),), generator=gen)


VARIANTS: dict[str, type[_Variant]] = {
    "random-mark": RandomMark,
    "pixel-shortcut": PixelShortcut,
    "shortcut-removed": ShortcutRemoved,
    "shortcut-randomised": ShortcutRandomised,
    "unseen-cue": UnseenCue,
}


VARIANT_ALIASES: dict[str, str] = {"shortcut-randomized": "shortcut-randomised", "clean": "shortcut-removed"}


def variant_class(name: str) -> type[_Variant]:
    """The variant class called ``name`` (case, ``_``/``-`` and the aliases of `VARIANT_ALIASES` allowed).

    Raises ``ValueError`` naming the valid names (and a close one) for an unknown name.
    """
    key = str(name).strip().lower().replace("_", "-")
    key = VARIANT_ALIASES.get(key, key)
    if key not in VARIANTS:
        raise ValueError(f"unknown variant {name!r}{did_you_mean(key, list(VARIANTS) + list(VARIANT_ALIASES))}; "
                         f"valid names: {', '.join(VARIANTS)}")
    return VARIANTS[key]


def make_variant(name: str, dataset: Dataset, **kwargs: Any) -> Dataset:
    """Wrap ``dataset`` in the variant called ``name`` (one of `VARIANTS`), passing ``kwargs`` on.

    "shortcut-randomized" is accepted as a spelling of "shortcut-randomised"; "clean" is "shortcut-removed".
    """
    return variant_class(name)(dataset, **kwargs)
