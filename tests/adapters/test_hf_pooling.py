"""Mask-aware pooling of wrapped transformers models, checked against transformers' own hidden states."""

from __future__ import annotations

import pytest
import torch

from similarity_plugins import hf
from similarity_plugins.adapters.pooling import pool_tokens
from similarity_plugins.adapters.text import TextDataset
from similarity_plugins.networks.activations import extract_layers
from tests.helpers.hf_models import byt5, small_bpe, tiny_bert, tiny_gpt2, tiny_llama, zen_lines

TEXTS = zen_lines()[:9]  # lengths 19..51 characters: every batch of 7 is padded
# float32 attention over padded vs unpadded sequences: the same sums in another order (about 1e-6 here)
TOL = 1e-5


def reference(model, tokenizer, pooling: str, index: int) -> torch.Tensor:
    """hidden_states[index] of each text run alone (no padding), pooled as ``pooling`` says: (N, D)."""
    rows = []
    with torch.no_grad():
        for text in TEXTS:
            ids = tokenizer(text, return_tensors="pt")["input_ids"]
            h = model(input_ids=ids, output_hidden_states=True).hidden_states[index][0]
            rows.append({"mean": h.mean(0), "last": h[-1], "first": h[0]}[pooling])
    return torch.stack(rows)


def ours(wrapped, batch_size: int) -> list[torch.Tensor]:
    names = wrapped.canonical_layers()
    return list(extract_layers(wrapped, names, TextDataset(TEXTS), batch_size=batch_size)[:-1])


@pytest.mark.parametrize("build", [tiny_gpt2, tiny_llama, tiny_bert], ids=["gpt2", "llama", "bert"])
@pytest.mark.parametrize("pooling", ["mean", "last", "first"])
def test_pooling_matches_transformers_for_any_batch_and_padding(build, pooling):
    tok = byt5()
    model = build(vocab=len(tok))
    base = model.model if hasattr(model, "model") else model  # the reference reads the backbone's hidden states
    blocks = len(hf(model, tokenizer=tok).canonical_layers()) - 1
    refs = [reference(base, tok, pooling, i) for i in range(blocks)]  # embeddings and blocks before the last
    for side in ("left", "right"):
        for batch_size in (1, 7):
            got = ours(hf(model, tokenizer=tok, pooling=pooling, padding_side=side), batch_size)
            for i, ref in enumerate(refs):
                assert torch.allclose(got[i], ref, atol=TOL, rtol=0), (side, batch_size, i)


def test_last_block_is_before_the_final_norm():
    tok = byt5()
    model = tiny_gpt2(vocab=len(tok))
    got = ours(hf(model, tokenizer=tok, pooling="last"), 7)[-1]
    with_norm = reference(model, tok, "last", -1)   # hidden_states[-1]: GPT-2's ln_f applied
    assert not torch.allclose(got, with_norm, atol=1e-3)
    assert torch.allclose(model.ln_f(got), with_norm, atol=TOL)


def test_mean_without_special_tokens():
    tok = byt5()  # appends EOS to every text
    model = tiny_gpt2(vocab=len(tok))
    got = ours(hf(model, tokenizer=tok, exclude_special=True, padding_side="left"), 7)[1]
    with torch.no_grad():
        rows = [model(input_ids=tok(t, return_tensors="pt")["input_ids"], output_hidden_states=True)
                .hidden_states[1][0, :-1].mean(0) for t in TEXTS]
    assert torch.allclose(got, torch.stack(rows), atol=TOL)


def test_a_second_tokenizer_reads_the_same_strings():
    bpe = small_bpe(zen_lines())
    model = tiny_llama(vocab=len(bpe))
    got = ours(hf(model, tokenizer=bpe, padding_side="left"), 7)
    assert torch.allclose(got[1], reference(model.model, bpe, "mean", 1), atol=TOL)


def test_flatten_refuses_padded_text_and_unknown_pooling_is_named():
    tok = byt5()
    model = tiny_gpt2(vocab=len(tok))
    with pytest.raises(ValueError, match="flatten"):
        ours(hf(model, tokenizer=tok, pooling="flatten"), 7)
    with pytest.raises(ValueError, match="did you mean 'mean'"):
        hf(model, tokenizer=tok, pooling="maen")


def test_empty_samples_are_refused():
    with pytest.raises(ValueError, match="empty string.*index 1"):
        TextDataset(["a text", "  "])
    hidden = torch.ones(2, 3, 4)
    with pytest.raises(ValueError, match="no tokens"):
        pool_tokens(hidden, torch.tensor([[True, True, False], [False, False, False]]), "mean")
