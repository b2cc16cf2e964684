"""The grid tests' counting metric."""

from __future__ import annotations

import pytest

import similarity_plugins as sp


@pytest.fixture
def counted(fresh_manager) -> list:
    """Registers the metric ``counted`` (a difference of activation means; needs the test split) and returns the
    list of the layer pairs it was called with, in order."""
    calls = []

    class Counted:
        needs = ("test",)
        activations_only = True

        @sp.hookimpl
        def similarity(self, front, end, layer, context):
            calls.append(layer)
            return float(context.activations(front, layer.front).mean() - context.activations(end, layer.end).mean())

    sp.register_metric(Counted(), "counted")
    return calls
