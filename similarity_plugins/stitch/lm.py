"""Stitching two language models that share a tokenizer: a token-wise linear map between residual streams.

The stitch ``T`` maps the front's hidden state at block i (every real token) into the end's stream at block j;
the end runs on from there (a forward hook replaces block j's hidden states). ``slm`` trains ``T`` to match the
end's next-token distribution (KL over the real tokens), ``dm`` the end's hidden state at block j (squared
error). The score is the stitched model's next-token accuracy relative to the end's own, on ``Data.test``.
"""

from __future__ import annotations

import time
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ..adapters.hf import HFModel
from ..adapters.pooling import first_tensor
from ..host.hookspecs import PluginContext
from ..host.results import LayerPair, SimilarityResult
from ..networks.data import iterate_batches
from ..networks.layer_calls import front_by_hook
from ..networks.model_state import frozen
from .settings import StitchSettings


def is_language_model(model: Any) -> bool:
    """Whether ``model`` is a wrapped transformers model that reads text (`similarity_plugins.hf`)."""
    return isinstance(model, HFModel) and model.reads_text


def lm_stitch_result(context: PluginContext, front: Any, end: Any, layer: LayerPair, objective: str,
                     options: dict | None) -> SimilarityResult:
    """Fit (memoised) and evaluate a token-wise stitch from ``front``'s ``layer.front`` to ``end``'s ``layer.end``.

    Returns a row whose score is stitched next-token accuracy / the end's; ``details`` hold both accuracies,
    ``perplexity_ratio`` (stitched / end), the losses and sizes. Raises ``ValueError`` for an objective other than
    ``slm``/``dm``, a model that does not read text, two tokenizers that give other ids, an end without an LM head,
    or a test split without a next-token pair (texts of one token), or one whose next tokens the end never predicts.
    """
    if objective not in ("slm", "dm"):
        raise ValueError(f"stitch-{objective} is for classifiers; stitch two language models with stitch-slm "
                         "(next-token distributions) or stitch-dm (hidden states)")
    if not (is_language_model(front) and is_language_model(end)):
        raise ValueError("stitching a language model needs two language models sharing a tokenizer; IRIs and "
                         "image stitching need one continuous input space")
    settings = StitchSettings.from_options(options, seed=context.seed)
    key = ("lm-stitch", id(front), id(end), layer.front, layer.end, objective, repr(settings))
    fitted = context.remember(key, lambda: _fit(context, front, end, layer, objective, settings), train_only=True)
    scores = _evaluate(context, front, end, layer, fitted["stitch"], settings)
    if scores["test_tokens"] == 0:
        raise ValueError("the test split has no next-token pair (every text is one token long, so there is no next "
                         "token to predict), so next-token accuracy is undefined; give test texts of two or more tokens")
    if scores["end_accuracy"] == 0:
        raise ValueError("the end model predicts no next token of the test split correctly, so relative accuracy "
                         "is undefined; use a trained end model")
    score = scores["stitched_accuracy"] / scores["end_accuracy"]
    details = {"objective": objective, "relative_accuracy": score, **scores, "final_loss": fitted["losses"][-1],
               "losses": fitted["losses"], "train_tokens": fitted["tokens"], "fit_seconds": fitted["seconds"],
               "stitch": f"token-wise linear {fitted['stitch'].in_features} -> {fitted['stitch'].out_features}",
               "settings": settings.as_dict()}
    return SimilarityResult(f"stitch-{objective}", score, details)


def _inputs(front: Any, end: Any, texts: list[str]) -> tuple[dict, dict, torch.Tensor]:
    """Both models' inputs for ``texts`` on one layout (refused when the tokenizers disagree) and the (B, T)
    real-token mask. Padded on two sides, both run on the right-padded one, which keeps any model's positions."""
    a, b = front.model_inputs(texts), end.model_inputs(texts)
    mask_a, mask_b = a["attention_mask"].bool(), b["attention_mask"].bool()
    ids_a = [row[m].tolist() for row, m in zip(a["input_ids"], mask_a)]
    ids_b = [row[m].tolist() for row, m in zip(b["input_ids"], mask_b)]
    if ids_a != ids_b:
        first = next(i for i, (x, y) in enumerate(zip(ids_a, ids_b)) if x != y)
        raise ValueError(f"the two models' tokenizers give different token ids (sample {first}: "
                         f"{ids_a[first][:6]}... vs {ids_b[first][:6]}...); stitching language models needs one "
                         "tokenizer: compare models of different tokenizers with activation-only metrics")
    if not torch.equal(mask_a, mask_b):   # the right-padded inputs carry no position ids: every model counts its own
        right, mask_a = (a, mask_a) if front.padding_side == "right" else (b, mask_b)
        a, b = dict(right), dict(right)
    return a, b, mask_a


def _run_end(end: Any, inputs: dict, layer: str, replacement: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """The end's logits (B, T, V) and its hidden states at ``layer``, with them replaced when ``replacement``."""
    seen: list[torch.Tensor] = []

    def hook(_module: nn.Module, _inputs: object, output: Any) -> Any:
        seen.append(first_tensor(output))
        if replacement is None:
            return None
        if isinstance(output, torch.Tensor):
            return replacement.to(output.dtype)
        return (replacement.to(seen[0].dtype), *tuple(output)[1:])

    handle = dict(end.named_modules())[layer].register_forward_hook(hook)
    try:
        out = end.hf_model(**inputs)
    finally:
        handle.remove()
    logits = getattr(out, "logits", None)
    if logits is None:
        raise ValueError(f"{type(end.hf_model).__name__} has no language-model head (no logits); stitch into a "
                         "causal LM such as GPT2LMHeadModel or LlamaForCausalLM")
    return logits.float(), seen[0].float()


def _front(front: Any, inputs: dict, layer: str) -> torch.Tensor:
    return first_tensor(front_by_hook(front.hf_model, layer, inputs, keywords=True)).float()


def _fit(context: PluginContext, front: Any, end: Any, layer: LayerPair, objective: str,
         settings: StitchSettings) -> dict:
    start = time.perf_counter()
    batches = []
    with torch.no_grad(), frozen(front, end):
        for texts, _ in iterate_batches(context.data.split("train"), settings.batch_size, "the train split"):
            a, b, mask = _inputs(front, end, texts)
            logits, hidden = _run_end(end, b, layer.end, None)
            batches.append((a, b, mask, _front(front, a, layer.front), logits.log_softmax(-1), hidden))
    h = torch.cat([x[3][x[2]] for x in batches])
    target = torch.cat([x[5][x[2]] for x in batches])
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(settings.seed)
        stitch = nn.Linear(h.shape[1], target.shape[1]).to(h.device)
    ones = torch.ones(len(h), 1, device=h.device)
    solution = torch.linalg.lstsq(torch.cat([h, ones], 1).double().cpu(), target.double().cpu()).solution
    with torch.no_grad():
        stitch.weight.copy_(solution[:-1].T.float())
        stitch.bias.copy_(solution[-1].float())
    optimiser = torch.optim.Adam(stitch.parameters(), lr=settings.lr, weight_decay=settings.weight_decay)
    losses = []
    with frozen(front, end):
        for _ in range(settings.epochs):
            total = 0.0
            for a, b, mask, front_h, end_logp, end_h in batches:
                mapped = stitch(front_h)
                if objective == "dm":
                    loss = ((mapped - end_h) ** 2).sum(-1)[mask].mean()
                else:
                    logits, _ = _run_end(end, b, layer.end, mapped)
                    kl = F.kl_div(logits.log_softmax(-1), end_logp, log_target=True, reduction="none").sum(-1)
                    loss = kl[mask].mean()
                optimiser.zero_grad()
                loss.backward()
                optimiser.step()
                total += float(loss.detach())
            losses.append(total / len(batches))
    stitch.requires_grad_(False)
    return {"stitch": stitch, "losses": losses or [float("nan")], "tokens": int(len(h)),
            "seconds": round(time.perf_counter() - start, 3)}


def _evaluate(context: PluginContext, front: Any, end: Any, layer: LayerPair, stitch: nn.Linear,
              settings: StitchSettings) -> dict:
    counts = torch.zeros(5, dtype=torch.float64)  # tokens, end correct, stitched correct, end CE, stitched CE
    with torch.no_grad(), frozen(front, end):
        for texts, _ in iterate_batches(context.data.split("test"), settings.eval_batch_size, "the test split"):
            a, b, mask = _inputs(front, end, texts)
            native, _ = _run_end(end, b, layer.end, None)
            stitched, _ = _run_end(end, b, layer.end, stitch(_front(front, a, layer.front)))
            pairs = mask[:, :-1] & mask[:, 1:]   # a real token followed by a real token
            target = a["input_ids"][:, 1:][pairs]
            for slot, logits in ((1, native), (2, stitched)):
                predicted = logits[:, :-1][pairs]
                counts[slot] += float((predicted.argmax(-1) == target).sum())
                counts[slot + 2] += float(F.cross_entropy(predicted, target, reduction="sum"))
            counts[0] += float(pairs.sum())
    n = max(float(counts[0]), 1.0)
    return {"end_accuracy": float(counts[1]) / n, "stitched_accuracy": float(counts[2]) / n,
            "end_perplexity": float(torch.exp(counts[3] / n)), "stitched_perplexity": float(torch.exp(counts[4] / n)),
            "perplexity_ratio": float(torch.exp((counts[4] - counts[3]) / n)), "test_tokens": int(counts[0])}
