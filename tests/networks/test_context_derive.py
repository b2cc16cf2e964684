"""A narrow Context: what a plugin may use is `PluginContext`, and every child context is made by one `derive`
that keeps the declared settings and, for the entries a child keeps, their in-place write counters."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch
from torch import nn

from similarity_plugins import Data
from similarity_plugins.host.hookspecs import PluginContext
from similarity_plugins.networks.context import SETTINGS, Context
from similarity_plugins.networks.parallel import World
from similarity_plugins.runner.grid.run import _local_context
from similarity_plugins.runner.score import ArrayContext
from tests.helpers.repo import ROOT, parsed

#: The code a plugin's ``context`` reaches: the built-in families, the services they hand it to, the example plugins.
PLUGIN_SIDE = [*sorted((ROOT / "similarity_plugins" / "plugins").glob("*.py")),
               *(ROOT / "similarity_plugins" / f for f in ("stitch/service.py", "stitch/lm.py", "iri/service.py")),
               *sorted((ROOT / "examples" / "plugin").glob("*.py"))]


def _members(protocol: type) -> set[str]:
    return set(protocol.__annotations__) | {n for n, v in vars(protocol).items() if callable(v) and not n.startswith("_")}


def _context_attributes(path: Path) -> set[str]:
    """The attributes the code in ``path`` reads of a name ``context``."""
    tree = parsed(path)
    return {node.attr for node in ast.walk(tree)
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "context"}


def test_plugins_and_their_services_use_only_what_plugin_context_declares():
    allowed = _members(PluginContext)
    used = {path.relative_to(ROOT).as_posix(): _context_attributes(path) for path in PLUGIN_SIDE}
    beyond = {name: sorted(attributes - allowed) for name, attributes in used.items() if attributes - allowed}
    assert not beyond, f"context members a plugin may not use (the runner's; or declare them in PluginContext): {beyond}"
    assert {"activations", "remember", "derived", "reuse_nodes", "world", "seed", "split"} <= set().union(*used.values())


def test_the_plugins_page_lists_exactly_the_members_of_plugin_context():
    page = (ROOT / "docs" / "plugins.md").read_text(encoding="utf-8")
    section = page.split("## What a plugin may use of the context", 1)[1].split("\n## ", 1)[0]
    listed = {row.split("`")[1].split("(")[0] for row in section.splitlines() if row.startswith("| `")}
    assert listed == _members(PluginContext)


def test_the_runners_contexts_are_plugin_contexts():
    x = torch.zeros(4, 2)
    assert isinstance(Context(Data()), PluginContext)
    assert isinstance(ArrayContext({"x": x}, {"test": torch.arange(4)}, seed=0, device=x.device, options=None),
                      PluginContext)


def _filled(**settings) -> tuple[Context, nn.Module]:
    model = nn.Identity()
    ctx = Context(Data(), seed=3, batch_size=7, reuse_nodes=True, derived_bytes=10**6, **settings)
    ctx.memo[("activations", id(model), "a", "test")] = torch.ones(3, 2)
    ctx.versions[("activations", id(model), "a", "test")] = (0,)
    ctx.remember(("fit",), lambda: torch.zeros(2), train_only=True)
    ctx.derived(model, "a", "test", ("gram",), lambda: torch.ones(3, 3))
    ctx.loaders[("activations", id(model), "b", "test")] = lambda: torch.ones(3, 2)
    return ctx, model


def test_derive_shares_the_caches_or_copies_the_kept_entries_with_their_counters():
    ctx, model = _filled()
    shared = ctx.derive(seed=9)
    assert (shared.seed, ctx.seed) == (9, 3)
    assert all(getattr(shared, name) is getattr(ctx, name) for name in ("memo", "versions", "loaders", "train_only"))
    assert {name: getattr(shared, name) for name in SETTINGS if name != "seed"} == \
        {name: getattr(ctx, name) for name in SETTINGS if name != "seed"}
    own = ctx.derive(keep=lambda key: key[0] in ("activations", "derived"))
    assert own.memo is not ctx.memo and set(own.memo) == {k for k in ctx.memo if k[0] in ("activations", "derived")}
    assert set(own.loaders) == set(ctx.loaders) and own.train_only == set() and list(own._derived) == list(ctx._derived)
    own.memo[("activations", id(model), "a", "test")].mul_(2)   # a write into a kept tensor is noticed
    assert own.drop_changed() == ["activations a test"]
    own.memo[("new",)] = 1
    assert ("new",) not in ctx.memo   # later entries are the child's own
    with pytest.raises(TypeError, match="derive\\(\\) takes the settings .*not colour"):
        ctx.derive(colour="red")


def test_every_child_context_keeps_the_declared_settings():
    ctx, model = _filled()
    other = Data(test=[(torch.zeros(1), 0)])
    children = {"for_call": ctx.for_call(ctx.data, seed=1, device=ctx.device, options={}, progress="never"),
                "for_call, other data": ctx.for_call(other, seed=1, device=ctx.device, options={}, progress="never"),
                "with_test": ctx.with_test(other.test), "grid on one rank": _local_context(ctx)}
    for name, child in children.items():
        assert (child.reuse_nodes, child.derived_bytes, child.batch_size) == (True, 10**6, 7), name
    assert children["for_call"].memo is ctx.memo and children["for_call, other data"].memo == {}
    assert set(children["with_test"].memo) == {("fit",)} and children["with_test"].train_only == {("fit",)}
    local = children["grid on one rank"]
    assert isinstance(local.world, World) and not local.world.distributed and local.progress == "never"
    assert set(local.memo) == {("activations", id(model), "a", "test")} and set(local.loaders) == set(ctx.loaders)
    assert local.versions == {("activations", id(model), "a", "test"): (0,)}
