"""`hf`: layer names, loading, text and paired data through compare and grids, error rows, models unchanged."""

from __future__ import annotations

import pytest
import torch

import similarity_plugins as sp
from tests.helpers.hf_models import byt5, small_bpe, tiny_bert, tiny_gpt2, tiny_llama, tiny_vit, zen_lines

TEXTS = zen_lines()


@pytest.mark.parametrize("build, expected", [
    (lambda v: tiny_gpt2(v), ["drop", "h.0", "h.1"]),
    (lambda v: tiny_gpt2(v, head=True), ["transformer.drop", "transformer.h.0", "transformer.h.1"]),
    (lambda v: tiny_llama(v), ["model.embed_tokens", "model.layers.0", "model.layers.1"]),
    (lambda v: tiny_llama(v, head=False), ["embed_tokens", "layers.0", "layers.1"]),
    (lambda v: tiny_bert(v), ["embeddings", "encoder.layer.0", "encoder.layer.1"]),
], ids=["gpt2", "gpt2-lm", "llama-lm", "llama", "bert"])
def test_layers_are_the_models_own_names_and_match_hidden_states(build, expected):
    tok = byt5()
    model = build(len(tok))
    wrapped = sp.hf(model, tokenizer=tok)
    assert sp.layers(wrapped) == expected
    names = dict(model.named_modules())
    assert all(name in names for name in expected)
    with torch.no_grad():
        hidden = model(**tok(TEXTS[:1], return_tensors="pt"), output_hidden_states=True).hidden_states
    assert len(hidden) == len(expected)   # the embedding output and one entry per block


def test_vit_layers_and_flatten_default():
    wrapped = sp.hf(tiny_vit())
    assert sp.layers(wrapped)[0] == "embeddings" and len(sp.layers(wrapped)) == 3
    assert wrapped.pooling == "flatten" and wrapped.view == "image"
    images = torch.rand(6, 3, 16, 16, generator=torch.Generator().manual_seed(0))
    report = sp.compare(wrapped, wrapped, [(sp.layers(wrapped)[-1],) * 2],
                        sp.Data(test=torch.utils.data.TensorDataset(images, torch.zeros(6, dtype=torch.long))),
                        metrics=["cka-linear"])
    assert report.results[0].score == pytest.approx(1.0, abs=1e-9)


def test_a_folder_loads_as_the_class_its_config_names(tmp_path):
    tok = byt5()
    model = tiny_gpt2(len(tok), head=True)
    model.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    loaded = sp.hf(str(tmp_path))
    assert type(loaded.hf_model).__name__ == "GPT2LMHeadModel" and loaded.tokenizer is not None
    assert sp.layers(loaded) == sp.layers(sp.hf(model, tokenizer=tok))
    with pytest.raises(ValueError, match="tokenizer"):
        sp.hf(model)


def snapshot(model):
    return ([p.detach().clone() for p in model.parameters()], [b.clone() for b in model.buffers()],
            [m.training for m in model.modules()], [p.requires_grad for p in model.parameters()])


def same(a, b):
    return (all(torch.equal(x, y) for x, y in zip(a[0], b[0])) and all(torch.equal(x, y) for x, y in zip(a[1], b[1]))
            and a[2:] == b[2:])


def test_two_tokenizers_in_a_grid_with_permutations_and_models_unchanged():
    tok, bpe = byt5(), small_bpe(TEXTS)
    gpt, llama = tiny_gpt2(len(tok), head=True), tiny_llama(len(bpe))
    llama.train()  # flags as the user left them must survive
    before = [snapshot(gpt), snapshot(llama)]
    a, b = sp.hf(gpt, tokenizer=tok), sp.hf(llama, tokenizer=bpe, pooling="last")
    data = sp.text_data(TEXTS, TEXTS)
    grid = sp.compare_grid({"gpt": a, "llama": b}, {"gpt": sp.layers(a), "llama": sp.layers(b)}, data,
                           metrics=["cka-linear", "procrustes", "rsa"], options={"permutations": 9},
                           pairs="across")
    assert all(row.ok for row in grid.report.results)
    cka = grid.matrix("cka-linear", "gpt", "llama")
    assert cka.shape == (3, 3) and ((cka > 0) & (cka <= 1)).all()
    p = grid.p_values("cka-linear", front="gpt", end="llama")
    assert ((p >= 0.1 - 1e-12) & (p <= 1)).all()   # 9 permutations: p >= 1/10
    report = sp.compare(a, b, [("transformer.h.1", "model.layers.1")], data,
                        metrics=["cka-linear", "stitch-slm", "iri-slm"])
    by = {r.metric: r for r in report.results}
    assert 0.0 <= by["cka-linear"].score <= 1.0
    assert by["stitch-slm"].score is None and "different token ids" in by["stitch-slm"].error
    assert by["iri-slm"].score is None and "continuous input space" in by["iri-slm"].error
    assert same(before[0], snapshot(gpt)) and same(before[1], snapshot(llama))
    assert llama.training and not gpt.training


def test_paired_views_each_model_reads_its_own():
    tok = byt5()
    vit, gpt = sp.hf(tiny_vit(), pooling="first"), sp.hf(tiny_gpt2(len(tok)), tokenizer=tok)
    images = torch.rand(len(TEXTS), 3, 16, 16, generator=torch.Generator().manual_seed(1))
    data = sp.paired_data({"image": images, "text": TEXTS})
    report = sp.compare(vit, gpt, [("layers.1", "h.1")], data, metrics=["cka-linear", "rsa"])
    assert all(r.ok for r in report.results)
    with pytest.raises(ValueError, match="'image' has 3 and 'text' has 19"):
        sp.paired_data({"image": images[:3], "text": TEXTS})
    wrong = sp.hf(tiny_gpt2(len(tok)), tokenizer=tok, view="caption")
    report = sp.compare(wrong, gpt, [("h.1", "h.1")], data, metrics=["cka-linear"])
    assert "reads the view 'caption'" in report.results[0].error


def test_paired_views_in_a_grid_with_permutations():
    tok = byt5()
    vit, gpt = sp.hf(tiny_vit(), pooling="mean"), sp.hf(tiny_gpt2(len(tok)), tokenizer=tok)
    images = torch.rand(len(TEXTS), 3, 16, 16, generator=torch.Generator().manual_seed(2))
    views = {"image": images, "text": TEXTS}
    grid = sp.compare_grid({"vit": vit, "gpt": gpt}, {"vit": sp.layers(vit), "gpt": sp.layers(gpt)},
                           sp.paired_data(views, views), ["cka-debiased", "procrustes", "mutual-knn", "linear-regression"],
                           pairs="across", options={"permutations": 4})
    assert all(row.ok for row in grid.report.results), [r.error for r in grid.report.results if not r.ok][:2]
    assert grid.p_values("procrustes", front="vit", end="gpt").shape == (3, 3)


def test_a_vision_model_with_its_processor_preprocesses_images_of_any_size(tmp_path):
    from transformers import ViTImageProcessor

    from similarity_plugins.networks.activations import extract_layers

    vit = tiny_vit()
    processor = ViTImageProcessor(size={"height": 16, "width": 16}, image_mean=[0.5, 0.4, 0.3],
                                  image_std=[0.2, 0.25, 0.3])
    images = torch.rand(5, 3, 24, 20, generator=torch.Generator().manual_seed(1))  # [0, 1], not the model's size
    data = sp.Data(test=torch.utils.data.TensorDataset(images, torch.zeros(5, dtype=torch.long)))
    block = sp.layers(sp.hf(vit))[-1]
    pixels = processor(images=list(images), do_rescale=False, return_tensors="pt")["pixel_values"]
    wrapped = sp.hf(vit, processor=processor)
    assert wrapped.preprocessing is not None and wrapped.processor is processor
    ours = extract_layers(wrapped, [block], data.test)[0]
    plain = extract_layers(sp.hf(vit), [block], torch.utils.data.TensorDataset(
        pixels, torch.zeros(5, dtype=torch.long)))[0]
    assert torch.allclose(ours, plain, atol=1e-5, rtol=0)
    assert sp.hf(vit, processor=processor, preprocess=False).preprocessing is None  # pixel_values already
    with pytest.raises(ValueError, match="size"):  # without its processor the 24 x 20 images are pixel_values
        extract_layers(sp.hf(vit), [block], data.test)
    vit.save_pretrained(tmp_path)
    processor.save_pretrained(tmp_path)
    loaded = sp.hf(str(tmp_path))
    assert loaded.preprocessing == wrapped.preprocessing
