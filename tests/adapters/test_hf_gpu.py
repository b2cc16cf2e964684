"""Wrapped transformers models on CUDA, in float32 and bfloat16 (skipped without a GPU)."""

from __future__ import annotations

import pytest
import torch

import similarity_plugins as sp
from similarity_plugins.adapters.text import TextDataset
from similarity_plugins.networks.activations import extract_layers
from tests.helpers.hf_models import byt5, tiny_gpt2, tiny_llama, zen_lines

TEXTS = zen_lines()
pytestmark = pytest.mark.gpu


def test_cuda_gives_the_cpu_scores():
    tok = byt5()
    a, b = sp.hf(tiny_gpt2(len(tok)), tokenizer=tok), sp.hf(tiny_llama(len(tok)), tokenizer=tok, pooling="last")
    data = sp.text_data(TEXTS)
    pairs = [("h.0", "model.layers.0"), ("h.1", "model.layers.1")]
    cpu = sp.compare(a, b, pairs, data, metrics=["cka-linear", "procrustes"])
    gpu = sp.compare(a, b, pairs, data, metrics=["cka-linear", "procrustes"], device="cuda")
    assert next(a.parameters()).device.type == "cpu"   # the user's model stays where it was
    for x, y in zip(cpu.results, gpu.results):
        assert x.ok and y.ok
        # other kernels (TF32 off by default in float32 matmuls, other reduction orders): agree to 1e-4
        assert y.score == pytest.approx(x.score, abs=1e-4)


def test_bfloat16_model_pools_its_own_hidden_states_and_scores_in_float64():
    tok = byt5()
    model = tiny_llama(len(tok)).to("cuda", torch.bfloat16)
    wrapped = sp.hf(model, tokenizer=tok, padding_side="left")
    got = extract_layers(wrapped, ["model.layers.0"], TextDataset(TEXTS), batch_size=7)[0]
    assert got.dtype == torch.float32 and got.device.type == "cpu"
    with torch.no_grad():
        ref = torch.stack([model.model(input_ids=tok(t, return_tensors="pt")["input_ids"].cuda(),
                                       output_hidden_states=True).hidden_states[1][0].float().mean(0).cpu()
                           for t in TEXTS])
    # bfloat16 keeps 8 bits of mantissa: padded and unpadded runs round differently (about 1e-2 relative)
    assert torch.allclose(got, ref, rtol=3e-2, atol=3e-2)
    report = sp.compare(wrapped, wrapped, [("model.layers.0", "model.layers.1")], sp.text_data(TEXTS),
                        metrics=["cka-linear"])
    assert isinstance(report.results[0].score, float) and 0 < report.results[0].score <= 1
    assert next(model.parameters()).dtype == torch.bfloat16
