"""What transformers adds to a model during its own forward (output-capturing hooks, a dynamic rotary embedding's
cache) is no modification: `compare` keeps it, the model works afterwards as before, and its digest is unchanged."""

from __future__ import annotations

import copy

import pytest
import torch

import similarity_plugins as sp
from similarity_plugins.networks.parallel import module_digest
from tests.helpers.hf_models import byt5, small_bpe, tiny_llama, zen_lines

TEXTS = zen_lines()


def capturing_llama(vocab: int, **config):
    model = tiny_llama(vocab, head=False)
    model.config.output_hidden_states = True   # transformers installs its capture hooks on the first forward
    for key, value in config.items():
        setattr(model.config, key, value)
    return model


def outputs(model, tok):
    with torch.no_grad():
        out = model(**tok(TEXTS[:4], padding=True, return_tensors="pt"))
    return out.last_hidden_state, out.hidden_states


@pytest.mark.parametrize("run_before", [False, True], ids=["first-forward-inside-compare", "run-before-compare"])
def test_the_models_hidden_states_work_after_compare(run_before):
    tok = byt5()
    model = capturing_llama(len(tok))
    twin = copy.deepcopy(model)
    if run_before:
        outputs(model, tok)
    assert bool(model.layers[0]._forward_hooks) == run_before
    wrapped = sp.hf(model, tokenizer=tok)
    report = sp.compare(wrapped, wrapped, [("layers.0", "layers.1")], sp.text_data(TEXTS),
                        metrics=["cka-linear", "procrustes"])
    assert all(row.ok for row in report.results), [row.error for row in report.results]
    last, hidden = outputs(model, tok)
    twin_last, twin_hidden = outputs(twin, tok)
    assert len(hidden) == 3 and torch.equal(last, twin_last)
    assert all(torch.equal(a, b) for a, b in zip(hidden, twin_hidden))


def test_a_metric_that_removes_transformers_hooks_is_caught_and_they_are_back(fresh_manager):
    tok = byt5()
    model = capturing_llama(len(tok))
    outputs(model, tok)   # the hooks are the model's now
    wrapped = sp.hf(model, tokenizer=tok)

    @sp.hookimpl
    def similarity(front, end, layer, data):
        for module in front.modules():
            module._forward_hooks.clear()
        return sp.SimilarityResult("meddler", 0.5)

    sp.register_metric(type("Meddler", (), {"similarity": staticmethod(similarity)})(), "meddler")
    row = sp.compare(wrapped, wrapped, "layers.0", sp.text_data(TEXTS), ["meddler"])["meddler"]
    assert "DonorModified" in row.error and "forward hooks on layers.0" in row.error
    assert len(outputs(model, tok)[1]) == 3


def test_a_dynamic_rotary_cache_is_no_change_and_no_new_digest():
    tok = byt5()
    model = capturing_llama(len(tok), rope_parameters={"rope_type": "dynamic", "factor": 2.0, "rope_theta": 1e4},
                            max_position_embeddings=16)
    model.rotary_emb.__init__(model.config)   # rebuild the embedding for the dynamic kind
    wrapped = sp.hf(model, tokenizer=tok)
    digest = module_digest([wrapped])
    with torch.no_grad():
        model(input_ids=torch.ones(1, 40, dtype=torch.long))   # the user's long input grows the cache
    assert model.rotary_emb.max_seq_len_cached == 40 and module_digest([wrapped]) == digest
    short = [text[:8] for text in TEXTS]   # shorter than 16 tokens: transformers resets the cache while compare runs
    report = sp.compare(wrapped, wrapped, [("layers.0", "layers.1")], sp.text_data(short), metrics=["cka-linear"])
    assert report.results[0].ok, report.results[0].error
    assert model.rotary_emb.max_seq_len_cached == 40 and module_digest([wrapped]) == digest   # as the user left it


def test_the_digest_ignores_capture_hooks_but_not_a_users_hook():
    tok = byt5()
    model = capturing_llama(len(tok))
    wrapped = sp.hf(model, tokenizer=tok)
    before = module_digest([wrapped])
    outputs(model, tok)
    assert model.layers[0]._forward_hooks and module_digest([wrapped]) == before
    handle = model.layers[0].register_forward_hook(lambda *_: None)
    try:
        assert module_digest([wrapped]) != before
    finally:
        handle.remove()


def test_a_second_extract_of_a_capturing_model_runs_no_forward(tmp_path):
    bpe = small_bpe(TEXTS)
    model = capturing_llama(len(bpe))
    wrapped = sp.hf(model, tokenizer=bpe)
    layers = ["layers.0", "layers.1"]
    runs = []
    handle = torch.nn.modules.module.register_module_forward_hook(
        lambda module, *_: runs.append(1) if module is model.layers[0] else None)
    try:
        sp.extract({"m": wrapped}, {"m": layers}, sp.text_data(TEXTS), tmp_path / "store")
        first = len(runs)
        sp.extract({"m": wrapped}, {"m": layers}, sp.text_data(TEXTS), tmp_path / "store")
    finally:
        handle.remove()
    assert first > 0 and len(runs) == first
    assert bpe.backend_tokenizer.truncation is None and bpe.backend_tokenizer.padding is None
