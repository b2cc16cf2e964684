"""Stitching two language models (stitch-slm, stitch-dm on sp.hf models); refusals as error rows."""

from __future__ import annotations

import pytest
import torch

import similarity_plugins as sp
from tests.helpers.hf_models import byt5, small_bpe, tiny_bart_decoder, tiny_gpt2, zen_lines

TEXTS = zen_lines()


@pytest.fixture(scope="module")
def trained():
    """A tiny GPT-2 LM trained 40 steps on the Zen of Python (byte level), so next-token accuracy is above 0."""
    tok = byt5()
    model = tiny_gpt2(len(tok), head=True)
    batch = tok(TEXTS, padding=True, return_tensors="pt")
    labels = batch["input_ids"].masked_fill(batch["attention_mask"] == 0, -100)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        opt = torch.optim.Adam(model.parameters(), 1e-2)
        model.train()
        for _ in range(40):
            loss = model(**batch, labels=labels).loss
            opt.zero_grad()
            loss.backward()
            opt.step()
    return tok, model.eval()


@pytest.mark.parametrize("metric", ["stitch-slm", "stitch-dm"])
def test_self_stitch_keeps_the_end_models_accuracy(trained, metric):
    tok, model = trained
    wrapped = sp.hf(model, tokenizer=tok)
    before = [p.detach().clone() for p in model.parameters()]
    report = sp.compare(wrapped, wrapped, [("transformer.h.0", "transformer.h.0")], sp.text_data(TEXTS, TEXTS),
                        metrics=[metric], options={"epochs": 2})
    row = report.results[0]
    assert row.ok, row.error
    assert row.details["end_accuracy"] > 0.1
    assert row.score >= 0.97 and row.details["perplexity_ratio"] == pytest.approx(1.0, abs=0.05)
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))


def test_other_tokenizers_and_objectives_give_error_rows(trained):
    tok, model = trained
    bpe = small_bpe(TEXTS)
    other = sp.hf(tiny_gpt2(len(bpe), seed=4, head=True), tokenizer=bpe)
    data = sp.text_data(TEXTS, TEXTS)
    report = sp.compare(sp.hf(model, tokenizer=tok), other, [("transformer.h.0", "transformer.h.0")], data,
                        metrics=["stitch-slm", "stitch-hlm", "iri-slm"], options={"epochs": 1})
    rows = {r.metric: r for r in report.results}
    assert "different token ids" in rows["stitch-slm"].error
    assert "stitch-slm" in rows["stitch-hlm"].error and rows["stitch-hlm"].score is None
    assert "continuous input space" in rows["iri-slm"].error


def test_a_test_split_without_a_next_token_pair_says_so():
    bpe = small_bpe(TEXTS)
    model = sp.hf(tiny_gpt2(len(bpe), seed=4, head=True), tokenizer=bpe)
    letters = list("abcdefgh")   # one BPE token each, and this tokenizer adds no special tokens
    assert all(len(bpe(t)["input_ids"]) == 1 for t in letters)
    report = sp.compare(model, model, [("transformer.h.0", "transformer.h.0")], sp.text_data(letters, TEXTS[:4]),
                        metrics=["stitch-dm"], options={"epochs": 1})
    error = report.results[0].error
    assert "no next-token pair (every text is one token long" in error and "trained end model" not in error


def test_two_padding_sides_stitch_on_the_layout_that_keeps_positions():
    from similarity_plugins.stitch.lm import _front, _inputs

    tok = byt5()
    gpt = sp.hf(tiny_gpt2(len(tok), head=True), tokenizer=tok, padding_side="left")
    bart = sp.hf(tiny_bart_decoder(len(tok)), tokenizer=tok)   # takes no position ids: padded on the right
    texts = TEXTS[:5]
    for front, end in ((gpt, bart), (bart, gpt)):
        a, b, mask = _inputs(front, end, texts)
        assert torch.equal(a["attention_mask"], b["attention_mask"]) and torch.equal(mask, a["attention_mask"].bool())
        assert mask[:, 0].all() and "position_ids" not in b   # right padding: every text starts at column 0
    a, _, mask = _inputs(gpt, bart, texts)
    with torch.no_grad():
        hidden = _front(gpt, a, "transformer.h.0")
        for i, text in enumerate(texts):   # the front's tokens on that layout are those of the text alone
            alone = gpt.hf_model(input_ids=tok(text, return_tensors="pt")["input_ids"], output_hidden_states=True)
            assert torch.allclose(hidden[i][mask[i]], alone.hidden_states[1][0], atol=1e-5)
