"""Ten transformers architectures built from configs: padding never shows in a pooled row, and `layers` lists only
modules that run once per forward pass."""

from __future__ import annotations

import copy

import pytest
import torch

import similarity_plugins as sp
from similarity_plugins.adapters.text import TextDataset
from similarity_plugins.networks.activations import extract_layers
from tests.helpers.hf_models import ARCHITECTURES, byt5, small_bpe, zen_lines

TEXTS = zen_lines()[:9]   # 19 to 51 characters: every batch of several texts is padded
TOL = 1e-5                # float32 attention over padded and unpadded sequences (about 1e-6 here)
# left padding moves their real tokens: a BART decoder takes no position ids and counts from the first column,
# RoBERTa counts its own from padding_idx + 1 (Bloom's ALiBi and T5's relative positions need none)
LEFT_REFUSED = {"bart-decoder", "roberta"}
LAYERS = {   # the embedding output where a module computes it (OPT and XGLM add positions outside any module)
    "gpt2": ["drop", "h.0", "h.1"], "llama": ["embed_tokens", "layers.0", "layers.1"],
    "bert": ["embeddings", "encoder.layer.0", "encoder.layer.1"], "opt": ["decoder.layers.0", "decoder.layers.1"],
    "bloom": ["word_embeddings_layernorm", "h.0", "h.1"], "gpt-neo": ["drop", "h.0", "h.1"],
    "bart-decoder": ["model.decoder.layernorm_embedding", "model.decoder.layers.0", "model.decoder.layers.1"],
    "t5-encoder": ["encoder.embed_tokens", "encoder.block.0", "encoder.block.1"], "xglm": ["layers.0", "layers.1"],
    "roberta": ["embeddings", "encoder.layer.0", "encoder.layer.1"],
}


def alone(model, tokenizer, layers: list[str]) -> dict[str, list[torch.Tensor]]:
    """Each text run by itself (no padding, no mask): ``{layer: [(T_i, D) hidden states of text i]}``."""
    modules = dict(model.named_modules())
    seen: dict[str, list[torch.Tensor]] = {name: [] for name in layers}

    def hook_for(name):
        def hook(_module, _inputs, output):
            hidden = output if isinstance(output, torch.Tensor) else output[0]
            seen[name].append(hidden[0].detach().clone())
        return hook

    handles = [modules[name].register_forward_hook(hook_for(name)) for name in layers]
    try:
        with torch.no_grad():
            for text in TEXTS:
                model(input_ids=tokenizer(text, return_tensors="pt")["input_ids"])
    finally:
        for handle in handles:
            handle.remove()
    return seen


def pooled(hidden: list[torch.Tensor], pooling: str) -> torch.Tensor:
    return torch.stack([{"mean": h.mean(0), "last": h[-1], "first": h[0]}[pooling] for h in hidden])


@pytest.mark.parametrize("arch", list(ARCHITECTURES))
def test_every_pooled_row_is_its_text_run_alone(arch):
    tok = byt5()
    model = ARCHITECTURES[arch](len(tok))
    layers = sp.layers(sp.hf(model, tokenizer=tok))
    refs = alone(model, tok, layers)
    for side in ("left", None):   # None: padded on the right, though the tokenizer below pads on the left itself
        if side == "left" and arch in LEFT_REFUSED:
            with pytest.raises(ValueError, match="left padding changes the outputs"):
                sp.hf(model, tokenizer=tok, padding_side="left")
            continue
        own = copy.deepcopy(tok)
        own.padding_side = "left"
        wrappers = {p: sp.hf(model, tokenizer=own, pooling=p, padding_side=side) for p in ("mean", "last", "first")}
        assert all(w.padding_side == (side or "right") for w in wrappers.values())
        for pooling, wrapped in wrappers.items():
            for batch_size in (1, 7):
                got = extract_layers(wrapped, layers, TextDataset(TEXTS), batch_size=batch_size)[:-1]
                for name, rows in zip(layers, got):
                    assert torch.allclose(rows, pooled(refs[name], pooling), atol=TOL, rtol=0), \
                        (side, pooling, batch_size, name, float((rows - pooled(refs[name], pooling)).abs().max()))


@pytest.mark.parametrize("arch", list(ARCHITECTURES))
def test_layers_run_once_per_forward(arch):
    tok = byt5()
    model = ARCHITECTURES[arch](len(tok))
    wrapped = sp.hf(model, tokenizer=tok)
    layers = sp.layers(wrapped)
    assert layers == LAYERS[arch]
    calls = dict.fromkeys(layers, 0)
    modules = dict(wrapped.named_modules())
    handles = [modules[n].register_forward_hook(lambda *_, n=n: calls.__setitem__(n, calls[n] + 1)) for n in layers]
    try:
        with torch.no_grad():
            wrapped(TEXTS[:3])
    finally:
        for handle in handles:
            handle.remove()
    assert all(count == 1 for count in calls.values()), calls
    grid = sp.compare_grid({"m": wrapped}, {"m": layers}, sp.text_data(TEXTS), metrics=["cka-linear"])
    assert all(row.ok for row in grid.report.results), [row.error for row in grid.report.results if not row.ok]


def test_a_block_shared_across_depth_is_named():
    from similarity_plugins.adapters.hf_layers import block_layers

    tok = byt5()
    model = ARCHITECTURES["gpt2"](len(tok))
    wrapped = sp.hf(model, tokenizer=tok)
    block = model.h[0]
    model.h[1] = block   # one block run twice per forward pass
    try:
        with pytest.raises(ValueError, match="run once"):
            block_layers(sp.hf(model, tokenizer=tok))
    finally:
        model.h[1] = wrapped.h[1]


def test_a_fast_tokenizer_keeps_its_settings():
    bpe = small_bpe(zen_lines())
    backend = bpe.backend_tokenizer
    backend.enable_truncation(max_length=40)
    before = (backend.truncation, backend.padding, bpe.padding_side, bpe.truncation_side)
    model = ARCHITECTURES["llama"](len(bpe))
    wrapped = sp.hf(model, tokenizer=bpe, padding_side="left", max_length=12)
    extract_layers(wrapped, sp.layers(wrapped), TextDataset(TEXTS), batch_size=7)
    assert (backend.truncation, backend.padding, bpe.padding_side, bpe.truncation_side) == before
