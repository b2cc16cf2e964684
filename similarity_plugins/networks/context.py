"""Shared services of one ``compare`` call: memoised splits, activations, outputs and results.

Every metric of a comparison gets the same [`Context`][Context], so the front's activations at a layer
are computed once however many metrics read them, and expensive products (fitted stitches, IRI
sets) are computed once per key with [`Context.remember`][Context.remember]. What a plugin may use of it is
[`PluginContext`][similarity_plugins.host.hookspecs.PluginContext]; the rest is the runner's. Every context made
from another (another call's settings, another test split, a private copy) is made by [`derive`][Context.derive].
"""

from __future__ import annotations

import dataclasses
from collections import OrderedDict
from typing import Any, Callable, Hashable

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from ..utils.arrays import nbytes_of
from ..utils.progress import Progress
from .activations import extract_activations, extract_layers, flatten, model_outputs
from .data import BadData, Data, split_size
from .parallel import World, current_world, split_shard
from .split import SplitNetwork
from .wrapped import WrappedModel

#: The memo entries whose tensors are handed to plugins (and checked for in-place writes after every metric).
SHARED_KINDS = ("activations", "shard", "outputs", "array rows")

#: The settings of a context, its constructor's arguments: what [`derive`][Context.derive] copies or replaces.
SETTINGS = ("data", "seed", "device", "options", "progress", "batch_size", "world", "reuse_nodes", "derived_bytes",
            "grid_layers")


def _nothing(_key: Hashable) -> bool:
    return False


def versions(value: Any) -> tuple[int, ...]:
    """The in-place write counters (``Tensor._version``) of the tensors in ``value`` (a tensor, or tuples of them)."""
    if isinstance(value, torch.Tensor):
        return (value._version,)
    if isinstance(value, (tuple, list)):
        return tuple(v for item in value for v in versions(item))
    return ()


class Context:
    """Services shared by the metrics of one comparison: the activations of each model at each layer, its outputs
    and its cut at a layer, computed once however many metrics read them, and what a metric keeps with
    [`remember`][Context.remember] (fitted stitches, IRI sets), computed once per key.

    A plugin uses the members that [`PluginContext`][similarity_plugins.host.hookspecs.PluginContext] names; the
    rest is the runner's. The settings (``data`` to ``grid_layers``) are the constructor's arguments; every context
    made from another (another call's settings, another test split, a private copy) is made by
    [`derive`][Context.derive].

    Attributes:
        data (Data): the call's inputs, ``train`` and ``test`` splits yielding ``(x, y)``.
        seed (int): the call's seed; every random choice derives from it.
        device (torch.device): where the models run.
        options (dict): the call's options.
        progress (Progress): ``"never"``, ``"auto"`` or ``"always"``: whether progress bars may be drawn.
        batch_size (int): the batch size of the shared forward passes.
        world (World): one process, or the ``torch.distributed`` ranks that share the work (default:
            ``current_world()``).
        reuse_nodes (bool): True in a grid, where a node's derived quantities serve many cells, so measures may
            compute them once per node with [`derived`][Context.derived].
        derived_bytes (int | None): the most bytes [`derived`][Context.derived] keeps, with the activations read
            through ``loaders``; least recently used entries beyond it are dropped and computed or read again.
        grid_layers (dict): in a grid, ``{id(model): [layer, ...]}``, the layers of each model's nodes, so that a
            measure can compute once what a whole block of cells shares; empty elsewhere.
        memo (dict): the memoised values, keyed by hashable tuples.
        versions (dict): the in-place write counters of the shared tensors in ``memo``, by key.
        loaders (dict): ``{activation key: read()}``, activations read from an activation store on first use
            instead of computed.
        row_sources (dict): ``{activation key: rows}``, the same activations as rows on disk that a measure may
            read in blocks ([`row_source`][Context.row_source]).
        train_only (set): the memo keys whose values depend on the models and the train split alone.
    """

    def __init__(self, data: Data, *, seed: int = 0, device: torch.device | None = None,
                 options: dict | None = None, progress: Progress = "never", batch_size: int = 256,
                 world: World | None = None, reuse_nodes: bool = False, derived_bytes: int | None = None,
                 grid_layers: dict[int, list[str]] | None = None) -> None:
        self.data = data
        self.seed = int(seed)
        self.device = device or torch.device("cpu")
        self.options = dict(options or {})
        self.progress = progress
        self.batch_size = batch_size
        self.memo: dict[Hashable, Any] = {}
        self.versions: dict[Hashable, tuple[int, ...]] = {}  # in-place write counters of the shared tensors
        self.world = world if world is not None else current_world()
        self.reuse_nodes = bool(reuse_nodes)
        self.derived_bytes = derived_bytes
        self._derived: OrderedDict[Hashable, int] = OrderedDict()  # droppable keys, least recently used first
        self.loaders: dict[Hashable, Callable[[], torch.Tensor]] = {}
        self.row_sources: dict[Hashable, Any] = {}
        self.train_only: set[Hashable] = set()   # memo keys whose values depend on the models and Data.train alone
        self.grid_layers: dict[int, list[str]] = dict(grid_layers or {})

    def derive(self, *, keep: Callable[[Hashable], bool] | None = None, **settings: Any) -> Context:
        """A child context: this one's settings (`SETTINGS`), those given in ``settings`` replaced, and its caches.

        Args:
            keep: None: the child shares this context's caches (the memo with the write counters of its shared
                tensors, the sizes of its derived entries and its train-only marks, and the readers and rows of stored
                activations), so what either computes, both have. A predicate on keys: the child gets caches of its
                own, holding this context's memo entries whose key passes, each with its write counter, size and
                train-only mark, and the readers and rows whose key passes; later entries of either are their own.
            **settings: new values of any of `SETTINGS` (``data``, ``seed``, ``device``, ``options``, ...).

        Returns:
            The child; this context is left as it is.

        Raises:
            TypeError: a name in ``settings`` that is not a setting.
        """
        unknown = sorted(set(settings) - set(SETTINGS))
        if unknown:
            raise TypeError(f"derive() takes the settings {', '.join(SETTINGS)}; not {', '.join(unknown)}")
        child = Context(**{name: settings.get(name, getattr(self, name)) for name in SETTINGS})
        if keep is None:
            child.memo, child.versions, child.loaders = self.memo, self.versions, self.loaders
            child._derived, child.train_only, child.row_sources = self._derived, self.train_only, self.row_sources
            return child
        # snapshots first: an abandoned metric thread may still be writing into this context
        child.memo = {key: value for key, value in list(self.memo.items()) if keep(key)}
        child.versions = {key: seen for key, seen in list(self.versions.items()) if key in child.memo}
        child._derived = OrderedDict((key, size) for key, size in list(self._derived.items()) if key in child.memo)
        child.train_only = {key for key in list(self.train_only) if key in child.memo}
        child.loaders = {key: read for key, read in list(self.loaders.items()) if keep(key)}
        child.row_sources = {key: rows for key, rows in list(self.row_sources.items()) if keep(key)}
        return child

    def for_call(self, data: Data, *, seed: int, device: torch.device, options: dict | None,
                 progress: Progress) -> Context:
        """A new context with one call's settings that shares this one's memo (its caches).

        This context is left as it is. The memo is shared only when ``data`` holds the same split
        objects as ``self.data`` (the caches are keyed by model, layer and split name, not by the data);
        for other data the new context starts with an empty memo of its own.
        """
        same = self.data.train is data.train and self.data.test is data.test
        return self.derive(keep=None if same else _nothing, data=data, seed=seed, device=device, options=options,
                           progress=progress)

    def remember(self, key: Hashable, compute: Callable[[], Any], *, train_only: bool = False) -> Any:
        """Return the memoised value for ``key``, computing it with ``compute()`` the first time.

        ``train_only``: the value depends on the models and ``Data.train`` alone, never on the test split (a
        fitted stitch, an IRI set, the training inputs), so a context made by [`with_test`][with_test] starts
        with it.
        """
        if key not in self.memo:
            self.memo[key] = compute()
            if isinstance(key, tuple) and key and key[0] in SHARED_KINDS:
                self.versions[key] = versions(self.memo[key])
        if train_only:
            self.train_only.add(key)
        return self.memo[key]

    def with_test(self, test: Dataset | DataLoader) -> Context:
        """A context with this one's settings and training split and ``test`` as its test split.

        It starts with this context's entries that depend on the models and the training split alone (those
        remembered with ``train_only=True``: stitches fitted, IRI sets, training inputs), so the same stitch
        is evaluated on another test split without training it again; nothing computed on the test split
        carries over. Later entries of either context are their own. This context is left as it is.
        """
        return self.derive(keep=self.train_only.__contains__, data=dataclasses.replace(self.data, test=test))

    def drop_changed(self) -> list[str]:
        """Forget the shared tensors (activations, labels, outputs) that were written in place since they were
        computed, so that the next metric gets them anew; returns what was dropped, as text (empty: nothing).

        A plugin that changes ``context.activations(...)`` in place (``x -= x.mean(0)``) changes them only for
        itself. Writes through a NumPy view (``x.numpy()[:] = 0``) bypass torch's write counter and are not seen.
        """
        changed = [key for key, seen in self.versions.items() if key in self.memo and versions(self.memo[key]) != seen]
        for key in changed:
            del self.memo[key]
            del self.versions[key]
            self._derived.pop(key, None)  # an entry read from a store: no longer held
        return [" ".join(str(part) for part in key if not isinstance(part, int)) for key in changed]

    def derived(self, model: nn.Module, layer: str, split: str, what: Hashable, compute: Callable[[], Any]) -> Any:
        """A quantity a measure derives from one node's activations (a centred Gram matrix, an RDM), memoised per node.

        Args:
            model: the model of the node the quantity comes from.
            layer: the layer of that node.
            split: the split of the activations (``"train"`` or ``"test"``).
            what: what it is and everything else it depends on (e.g. ``("cka-gram", debiased, max_samples)``).
            compute: ``compute()`` builds it from ``context.activations(model, layer, split)``; it must be
                deterministic, since under ``derived_bytes`` an entry may be dropped and built again.

        Returns:
            The memoised value. Entries count their NumPy arrays' and tensors' bytes against ``derived_bytes``.
        """
        key = ("derived", id(model), layer, split, what)
        if key in self.memo:
            if key in self._derived:
                self._derived.move_to_end(key)
            return self.memo[key]
        return self._hold(key, compute())

    def _hold(self, key: Hashable, value: Any) -> Any:
        """Memoise ``value`` under ``key`` as an entry that may be dropped under ``derived_bytes``."""
        self.memo[key] = value
        self._derived[key] = nbytes_of(value)
        self._evict(keep=key)
        return value

    def _evict(self, keep: Hashable) -> None:
        """Drop least recently used droppable entries (never ``keep``) while they hold more than ``derived_bytes``."""
        if self.derived_bytes is None:
            return
        while sum(self._derived.values()) > self.derived_bytes and len(self._derived) > 1:
            oldest = next(k for k in self._derived if k != keep)
            del self._derived[oldest]
            self.memo.pop(oldest, None)
            self.versions.pop(oldest, None)

    def capture(self, model: nn.Module, layers: list[str], split: str = "test") -> None:
        """Activations of ``model`` at all of ``layers`` on ``split`` from one forward pass, memoised as
        [`activations`][activations] and [`local_activations`][local_activations] memoise them (a layer already held is not run
        again).

        Under torch.distributed each rank runs its share and the shares are gathered (every rank holds all N
        rows); a failure on any rank raises the same [`CollectiveError`][parallel.CollectiveError] on every rank.
        """
        todo = [n for n in dict.fromkeys(layers)
                if ("activations", id(model), n, split) not in self.memo
                and ("activations", id(model), n, split) not in self.loaders]
        if not todo:
            return
        whole = self.data.split(split)
        rows = self.split_rows(split) if self.world.distributed else None
        part = split_shard(whole, rows) if rows is not None else None
        rows = rows if part is not None else None

        def run() -> tuple[torch.Tensor, ...]:
            def extract(dataset):
                return extract_layers(model, todo, dataset, batch_size=self.batch_size, device=self.device,
                                      progress=self.progress, desc=f"activations {type(model).__name__} ({split})")
            try:
                if rows is not None and len(rows) == 0:  # no share: the right shapes from one sample
                    return tuple(t[:0] for t in extract(split_shard(whole, range(1))))
                return extract(whole if rows is None else part)
            except BadData as exc:
                raise BadData(str(exc).replace("the data split", f"the {split} split")) from None

        if rows is None:
            local = run()
            full = local
        else:
            shares = self.world.exchange(run, f"activations of {type(model).__name__} ({split})")
            local = shares[self.world.rank]
            full = tuple(torch.cat(parts) for parts in zip(*shares))
        for i, name in enumerate(todo):
            self.memo[("shard", ("activations", id(model), name), split)] = ((local[i], local[-1]), rows)
            key = ("activations", id(model), name, split)
            self.memo[key] = full[i]
            self.versions[key] = versions(full[i])

    def split(self, model: nn.Module, layer: str, taps: tuple[str, ...] | None = None) -> SplitNetwork:
        """The memoised `SplitNetwork` of ``model`` at ``layer``."""
        key = ("split", id(model), layer, taps)
        return self.remember(key, lambda: SplitNetwork(model, layer, taps), train_only=True)

    def split_rows(self, split: str) -> range | None:
        """This rank's rows of a split (``range(N)`` in one process); None when the split has no length."""
        n = split_size(self.data.split(split))
        return None if n is None else self.world.shard(n)

    def run_sharded(self, split: str, run, tag: str) -> tuple[tuple[torch.Tensor, ...], range | None]:
        """``run(dataset)`` on this rank's share of ``split``: returns (``run``'s tuple of tensors (n_r, ...), rows).

        Memoised per ``tag``. ``rows`` is None when this rank ran the whole split (one process, or a split
        without length); a rank with no share gets empty tensors of the right shapes (from a 1-sample probe).
        """
        def compute():
            whole = self.data.split(split)
            rows = self.split_rows(split) if self.world.distributed else None
            part = split_shard(whole, rows) if rows is not None else None
            if rows is None or part is None:  # one process, or an unindexable split: run it whole
                return run(whole), None
            if len(rows) == 0:  # no share: the right shapes from one sample, then nothing
                probe = run(split_shard(whole, range(1)))
                return tuple(t[:0] for t in probe), rows
            return run(part), rows
        def named() -> tuple[tuple[torch.Tensor, ...], range | None]:
            try:
                return compute()
            except BadData as exc:  # say which split
                raise BadData(str(exc).replace("the data split", f"the {split} split")) from None
        return self.remember(("shard", tag, split), named)

    def local_activations(self, model: nn.Module, layer: str,
                          split: str = "test") -> tuple[torch.Tensor, torch.Tensor, range | None]:
        """This rank's share of [`activations`][activations] (layer's own shape), its labels, and its rows.

        ``rows`` is None when the rank holds the whole split (one process, or a split without length).
        """
        def run(dataset):
            if isinstance(model, WrappedModel):  # a wrapped model: hooked, each output made rows its own way
                return extract_layers(model, [layer], dataset, batch_size=self.batch_size, device=self.device,
                                      progress=self.progress, desc=f"activations {layer} ({split})")
            return extract_activations(self.split(model, layer), dataset, batch_size=self.batch_size,
                                       device=self.device, progress=self.progress, desc=f"activations {layer} ({split})")
        (acts, labels), rows = self.run_sharded(split, run, ("activations", id(model), layer))
        return acts, labels, rows

    def activations(self, model: nn.Module, layer: str, split: str = "test", *, flat: bool = True) -> torch.Tensor:
        """Activations of ``model`` at ``layer`` on a data split, float32 on the CPU, memoised.

        ``flat=True`` gives (N, D) (CNN maps as C*H*W, tokens as T*D); ``flat=False`` the layer's
        own shape (N, C, H, W) or (N, T, D). Under torch.distributed each rank extracts its share and the
        shares are gathered, so every rank holds all N rows (memory: the whole array per rank).
        """
        def compute() -> torch.Tensor:
            acts, _, rows = self.local_activations(model, layer, split)
            if rows is None:
                return acts
            return self.world.gather_rows(acts, f"activations {layer} ({split})")
        key = ("activations", id(model), layer, split)
        if key in self.loaders:
            if key not in self.memo:
                self._hold(key, self.loaders[key]())
                self.versions[key] = versions(self.memo[key])
            elif key in self._derived:
                self._derived.move_to_end(key)
            acts = self.memo[key]
        else:
            acts = self.remember(key, compute)
        return flatten(acts) if flat else acts

    def row_source(self, model: nn.Module, layer: str, split: str = "test") -> Any | None:
        """The activations of ``model`` at ``layer`` as rows on disk, when they come from an activation store and are
        not held in memory yet: an object with ``shape`` (N, D) whose slices ``rows[i:j]`` are NumPy arrays (the
        store's entry in the grid's sample order). A measure that reduces to sums over samples may read it in
        blocks instead of calling [`activations`][activations]; None: read them with `activations`."""
        key = ("activations", id(model), layer, split)
        return None if key in self.memo else self.row_sources.get(key)

    def outputs(self, model: nn.Module, split: str = "test") -> tuple[torch.Tensor, torch.Tensor]:
        """Logits (N, classes) and labels (N,) of ``model`` on a split, on the CPU, memoised (sharded like
        [`activations`][activations] under torch.distributed)."""
        def compute() -> tuple[torch.Tensor, torch.Tensor]:
            def run(dataset):
                return model_outputs(model, dataset, batch_size=self.batch_size, device=self.device)
            (logits, labels), rows = self.run_sharded(split, run, ("outputs", id(model)))
            if rows is None:
                return logits, labels
            return (self.world.gather_rows(logits, f"outputs ({split})"),
                    self.world.gather_rows(labels, f"labels ({split})"))
        return self.remember(("outputs", id(model), split), compute)
