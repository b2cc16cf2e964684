"""The hooks of a metric plugin (project name ``similarity_plugins``): ``similarity`` and ``register_metrics``.

A metric is a plugin object (a module, a class or an instance) with one ``similarity`` hookimpl.
Its name is the name it was registered under: the entry-point name for a third-party package's
single-metric entry point (group ``similarity_plugins``), the name given to ``register(name, plugin)``
for a family (see [`register_metrics`][register_metrics]), the name its family module registers it under for the
built-in ones (the first to take a name keeps it). Example, a complete plugin:

```python
import similarity_plugins

@similarity_plugins.hookimpl
def similarity(front, end, layer, context):
    x = context.activations(front, layer.front, "test")   # (N, D) float32, flattened
    y = context.activations(end, layer.end, "test")
    return float(similarity_plugins.functional.cka(x, y))
```

Optional attributes on the plugin object declare what the metric takes and what its score means:
``description``, ``options``, ``needs``, ``kind``, ``range``, ``symmetric``, ``invariances``,
``activations_only``, ``deterministic`` and ``family``. Each is declared once, with its type, default and
meaning, by [`MetricPlugin`][similarity_plugins.host.plugin.MetricPlugin]: subclass it, or set the attributes
on any plugin object (each one missing takes the default).

Every metric call goes through pluggy: the runner asks the plugin manager to call the ``similarity`` hook with the
metric's own hookimpl inside every ``similarity`` wrapper (``@hookimpl(wrapper=True)``) of any registered plugin
(``similarity_plugins.host.dispatch``). A wrapper sees every call of every metric, with its arguments
(``metric`` names the metric) and its result, and may time, log or replace it; ``add_hookcall_monitoring`` and
``enable_tracing`` of the manager trace the calls. What a plugin may use of its ``context`` argument is
[`PluginContext`][similarity_plugins.host.hookspecs.PluginContext].
"""

from __future__ import annotations

from typing import Any, Callable, Hashable, Protocol, runtime_checkable

import pluggy
import torch

PROJECT_NAME = "similarity_plugins"

hookspec = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)


@hookspec(firstresult=True)
def similarity(front, end, layer, data, options, context, seed, device, metric) -> Any:  # type: ignore[empty-body]
    """Score how similar ``front`` (network A) and ``end`` (network B) are at ``layer``.

    A hookimpl may take any subset of these arguments (pluggy passes only those it names). The donors must be
    as they were when it returns (parameters, buffers, ``training`` and ``requires_grad`` flags);
    [`frozen`][similarity_plugins.networks.model_state.frozen] does that for you.

    One call runs one metric: its own hookimpl, inside every wrapper of this hook (``@hookimpl(wrapper=True)``);
    the call's value is that hookimpl's return value, or what a wrapper returns instead (``firstresult``: one
    value, not a list).

    Args:
        front (torch.nn.Module): network A, a donor.
        end (torch.nn.Module): network B, a donor.
        layer (LayerPair): ``.front`` (the cut in A) and ``.end`` (the cut in B), both ``named_modules()`` names.
        data (Data): ``train`` and ``test`` splits yielding ``(x, y)``.
        options (dict): this metric's options: for a metric that declares ``options``, every declared option (its
            default unless given, globally or in ``options[name]``); for one that declares none, the global
            options merged with ``options[name]``.
        context (PluginContext): the shared services of one ``compare`` call (cached activations, network splits,
            memos, progress): what a plugin may use of it is [`PluginContext`][similarity_plugins.host.hookspecs.PluginContext].
        seed (int): every random choice must derive from it.
        device (torch.device): the device the donors run on.
        metric (str): the name the metric was registered under (a wrapper reads it to tell the calls apart).

    Returns:
        A float score, or a [`SimilarityResult`][similarity_plugins.host.results.SimilarityResult] (its ``metric``
            and ``layer`` are filled in for you), or a dict ``{"score": float, "details": {...}}``. Raise to report
            an error: the error goes into this metric's row and the other metrics still run.
    """


@hookspec
def register_metrics(register) -> None:  # type: ignore[empty-body]
    """Add a family of metrics from one entry point: call ``register(name, plugin)`` once per metric.

    The entry point of the group ``similarity_plugins`` names an object (usually a module) with this
    hookimpl instead of ``similarity``; its own name is then only a label (use the package's name):

    ```python
    # pyproject.toml:  [project.entry-points.similarity_plugins]
    #                  my-package = "my_package.metrics"
    import similarity_plugins

    @similarity_plugins.hookimpl
    def register_metrics(register):
        register("my-distance", MyDistance)      # a class, instance, module or @hookimpl function
        register("my-similarity", MySimilarity)
    ```

    ``register(name, plugin, *, replace=False)`` registers ``plugin`` (with a ``similarity`` hookimpl
    and the optional attributes listed in this module's docstring) as the metric ``name``. A name that
    is taken is skipped with a warning naming both packages; ``replace=True`` replaces a metric of the
    same package only. The entry point is imported only when one of its metrics is needed (a name not
    known yet, ``list``, a wildcard or the default selection), so keep its import light.
    """


@runtime_checkable
class PluginContext(Protocol):
    """What a metric plugin (and a service it hands its ``context`` to) may use of the ``context`` argument.

    The runner's [`Context`][similarity_plugins.networks.context.Context] has more (its caches, the write counters
    of shared tensors, the readers of stored activations, how child contexts are made): those are the runner's,
    and may change. ``score`` hands an array context with the same members, whose ``split``, ``outputs`` and
    ``run_sharded`` raise ``TypeError`` (there are no models). Read the fields, never assign them.

    Attributes:
        data: the ``Data`` of the call: ``train`` and ``test`` splits yielding ``(x, y)`` (``data.split(name)``).
        seed: the call's seed (int); every random choice must derive from it.
        device: the ``torch.device`` the donors run on.
        progress: ``"never"``, ``"auto"`` or ``"always"``: whether bars may be drawn (`progress_bar` reads it).
        batch_size: the batch size of the shared forward passes.
        world: the processes that share the work: one process, or the ranks of ``torchrun`` (``world.distributed``,
            ``world.rank``, ``world.size``, ``world.shard(n)``, ``world.exchange(fn, what)``, ``world.reduce_sum``,
            ``world.gather_rows``).
        reuse_nodes: True in a grid, where one node's activations serve many cells: a measure then builds what it
            derives from one node once, with `derived`.
        derived_bytes: the most bytes a grid may hold of what measures derive from nodes (its ``cache_bytes``), or
            None (no bound): a measure that needs more says so before it starts.
        grid_layers: in a grid, ``{id(model): [layer, ...]}``: the layers of each model's nodes, for what a whole
            block of cells (one model's layers against another's) shares; empty elsewhere.
    """

    data: Any
    seed: int
    device: torch.device
    progress: str
    batch_size: int
    world: Any
    reuse_nodes: bool
    derived_bytes: int | None
    grid_layers: dict[int, list[str]]

    def activations(self, model: Any, layer: str, split: str = "test", *, flat: bool = True) -> torch.Tensor:
        """Activations of ``model`` at ``layer`` on a split, memoised: (N, D) float32 when ``flat``, else the layer's
        own shape (N, C, H, W) or (N, T, D). Shared with the other metrics: never write into them."""

    def row_source(self, model: Any, layer: str, split: str = "test") -> Any | None:
        """The same activations as rows on disk, when they come from an activation store and are not held in memory
        yet (a grid from a store, ``score`` on store entries): an object with ``shape`` (N, D) whose slices
        ``rows[i:j]`` are NumPy arrays. A measure that reduces to sums over samples may read it in blocks; None: use
        `activations`."""

    def local_activations(self, model: Any, layer: str,
                          split: str = "test") -> tuple[torch.Tensor, torch.Tensor | None, range | None]:
        """This rank's share of `activations` (the layer's own shape), its labels (N_r,) or None, and its rows
        (None when this process holds the whole split)."""

    def outputs(self, model: Any, split: str = "test") -> tuple[torch.Tensor, torch.Tensor]:
        """Logits (N, classes) and labels (N,) of ``model`` on a split, memoised."""

    def split(self, model: Any, layer: str, taps: tuple[str, ...] | None = None) -> Any:
        """The memoised ``SplitNetwork`` of ``model`` cut at ``layer`` (``front(x)``, ``end(h)``)."""

    def run_sharded(self, split: str, run: Callable[[Any], tuple[torch.Tensor, ...]],
                    tag: Hashable) -> tuple[tuple[torch.Tensor, ...], range | None]:
        """``run(dataset)`` on this rank's share of ``split``, memoised per ``tag``: (its tensors, the rows)."""

    def remember(self, key: Hashable, compute: Callable[[], Any], *, train_only: bool = False) -> Any:
        """The value memoised under ``key``, computed by ``compute()`` the first time. ``train_only``: it depends on
        the models and the train split alone (a fitted stitch, an IRI set)."""

    def derived(self, model: Any, layer: str, split: str, what: Hashable, compute: Callable[[], Any]) -> Any:
        """A quantity derived from one node's activations (a centred Gram matrix), memoised per node; ``what``
        names it and everything else it depends on; ``compute`` must be deterministic (it may run again)."""
