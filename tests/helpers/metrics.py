"""Metric plugins built in a line for the tests that only need what a metric returns."""

from __future__ import annotations

from typing import Any, Callable

import torch

import similarity_plugins as sp


def returning(value: object) -> type:
    """A metric plugin class that reads activations only and whose ``similarity`` returns ``value`` as it is."""

    class Returning:
        activations_only = True

        @sp.hookimpl
        def similarity(self):
            return value

    return Returning


class Meddler:
    """A metric that changes the front model (adds 1 to its first parameter), which the donor guard must catch."""

    @sp.hookimpl
    def similarity(self, front):
        with torch.no_grad():
            next(front.parameters()).add_(1.0)
        return 0.5


def observed_cka(observe: Callable[[Any], None]) -> object:
    """A deterministic linear CKA on the test activations that calls ``observe(context)`` once it has read them."""

    class ObservedCKA:
        deterministic = True
        activations_only = True

        @sp.hookimpl
        def similarity(self, front, end, layer, context):
            from similarity_plugins.cka import cka

            x, y = context.activations(front, layer.front), context.activations(end, layer.end)
            observe(context)
            return cka(x, y)

    return ObservedCKA()
