"""Text batched by length: the samples sorted by token count, cut into batches of a bounded number of tokens, and
the rows put back in the data's order afterwards.

A batch of texts is padded to its longest text, so batches of the data's order (a 5-token text beside a
200-token one) spend most of their work on padding. Sorted by length, each batch holds texts of about one
length and is bounded by its padded tokens (samples x longest), not by its samples: many short texts or a few
long ones. A pooled row does not depend on its batch (`pooling`), so the rows are those of any other batching, in
the data's order.
"""

from __future__ import annotations

import itertools
from typing import Any, Iterable, Iterator

import torch

from .wrapped import WrappedModel

#: A batch of ``batch_size`` texts holds at most ``batch_size * TOKENS_PER_SAMPLE`` padded tokens.
TOKENS_PER_SAMPLE = 32

Batch = tuple[Any, torch.Tensor]


def length_plan(counts: list[int], max_tokens: int) -> list[list[int]]:
    """Batches of sample indices: the samples sorted by token count (ties in data order), cut so that each batch
    holds at most ``max_tokens`` padded tokens (a sample longer than that is a batch of its own).

    Args:
        counts: the token count of each sample, in data order.
        max_tokens: the bound on ``len(batch) * max(counts of the batch)``.

    Returns:
        Lists of indices into ``counts``; together they hold every index once, shortest samples first.
    """
    order = sorted(range(len(counts)), key=lambda i: (counts[i], i))
    batches: list[list[int]] = []
    for i in order:
        if batches and (len(batches[-1]) + 1) * max(counts[i], 1) <= max_tokens:
            batches[-1].append(i)
        else:
            batches.append([i])
    return batches


def by_length(model: WrappedModel, batches: Iterable[Batch], batch_size: int) -> tuple[Iterable[Batch], torch.Tensor | None]:
    """The batches of a wrapped model's data, regrouped by length when it reads text, and the order that undoes it.

    Args:
        model: a [`WrappedModel`][similarity_plugins.networks.wrapped.WrappedModel] (its ``reads_text``, ``view``,
            ``pooling`` and ``token_counts(texts)``).
        batches: the data's ``(x, y)`` batches (`iterate_batches`): x a list of strings, or a dict of views of which
            the model reads ``model.view``.
        batch_size: the batches hold at most ``batch_size * TOKENS_PER_SAMPLE`` padded tokens (`length_plan`):
            as many tokens as ``batch_size`` texts of 32 tokens, in more texts when they are shorter.

    Returns:
        ``(batches, order)``. For text, a list of ``(texts, labels)`` batches made by `length_plan` (only the view
            the model reads is kept) and ``order`` (N,) int64, the data index of each row the batches give in turn,
            so ``rows[torch.argsort(order)]`` are in data order. For other data (the model does not read it as
            text) and for ``pooling="flatten"`` (which refuses padded batches, so it keeps the data's), the
            batches as they come and None.
    """
    stream = iter(batches)
    first = next(stream, None)
    if first is None or not model.reads_text or _texts(model, first[0]) is None or model.pooling == "flatten":
        return (itertools.chain([] if first is None else [first], stream)), None
    texts: list[str] = []
    labels: list[torch.Tensor] = []
    for x, y in itertools.chain([first], stream):
        part = _texts(model, x)
        if part is None:
            raise TypeError(f"a batch of the data holds {type(x).__name__} where the batches before held text")
        texts += part
        labels.append(y)
    y_all = torch.cat(labels)
    plan = length_plan(model.token_counts(texts), batch_size * TOKENS_PER_SAMPLE)
    order = torch.tensor(list(itertools.chain.from_iterable(plan)), dtype=torch.long)
    return [([texts[i] for i in batch], y_all[batch]) for batch in plan], order


def _texts(model: WrappedModel, x: Any) -> list[str] | None:
    if isinstance(x, dict):
        x = x.get(model.view)
    if isinstance(x, list) and all(isinstance(t, str) for t in x):
        return x
    return None


def in_data_order(rows: Iterator[torch.Tensor] | list[torch.Tensor], order: torch.Tensor | None) -> list[torch.Tensor]:
    """``rows`` (each (N, ...) in the order of the batches) put back in data order (as they are for ``order=None``)."""
    if order is None:
        return list(rows)
    inverse = torch.argsort(order)
    return [r[inverse] for r in rows]
