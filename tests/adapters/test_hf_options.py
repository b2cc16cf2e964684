"""`hf` options checked where they enter, by the package's one rules: yes/no words, max_length within the model's
limit, a folder without tokenizer files, token ids beyond the vocabulary, a dual encoder wrapped whole, and
text files with a byte-order mark."""

from __future__ import annotations

import pytest
import torch

import similarity_plugins as sp
from similarity_plugins.apps.zoo import build_model
from similarity_plugins.cli.main import main
from tests.helpers.hf_models import byt5, small_bpe, tiny_gpt2, transformers, zen_lines

TEXTS = zen_lines()


@pytest.fixture(scope="module")
def gpt():
    """A byte-level tokenizer and a tiny GPT-2 of its vocabulary (256 positions), shared: wrapping changes nothing."""
    tok = byt5()
    return tok, tiny_gpt2(len(tok))


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    root = tmp_path_factory.mktemp("gpt")
    tok = byt5()
    tiny_gpt2(len(tok), head=True).save_pretrained(root)
    tok.save_pretrained(root)
    return root


@pytest.mark.parametrize("value, read", [(False, False), ("false", False), ("No", False), (0, False), ("on", True),
                                         (True, True), (1, True)])
def test_yes_no_options_read_the_one_rule(gpt, value, read):
    tok, model = gpt
    assert sp.hf(model, tokenizer=tok, exclude_special=value).exclude_special is read


@pytest.mark.parametrize("option", ["exclude_special", "preprocess", "local_files_only"])
@pytest.mark.parametrize("value", ["flase", 2, "", [True]])
def test_a_yes_no_option_that_is_no_word_is_an_error_naming_the_words(gpt, option, value):
    tok, model = gpt
    with pytest.raises(ValueError, match=rf"hf option {option}: expected true or false \(also yes/no, on/off, 1/0\)"):
        sp.hf(model, tokenizer=tok, **{option: value})


def test_spec_queries_go_through_the_same_checks(folder, capsys):
    assert build_model(f"hf:{folder}?exclude_special=false").exclude_special is False
    assert build_model(f"hf:{folder}?exclude_special=yes&max_length=16").max_length == 16
    assert main(["layers", f"hf:{folder}?exclude_special=flase"]) == 2
    err = capsys.readouterr().err
    assert "exclude_special: expected true or false (also yes/no, on/off, 1/0), got 'flase'" in err
    assert "Traceback" not in err
    assert main(["layers", f"hf:{folder}?padding_side=middle"]) == 2
    assert "must be one of left, right" in capsys.readouterr().err


@pytest.mark.parametrize("value", [0, -1, True, 2.5, "16", float("nan")])
def test_max_length_is_a_positive_whole_number(gpt, value):
    tok, model = gpt
    with pytest.raises(ValueError, match="max_length must be a positive whole number of tokens"):
        sp.hf(model, tokenizer=tok, max_length=value)


def test_max_length_is_no_larger_than_the_models_position_limit(gpt):
    tok, model = gpt   # n_positions=256
    assert sp.hf(model, tokenizer=tok, max_length=256).max_length == 256
    with pytest.raises(ValueError, match=r"max_length=257 is more than GPT2Model reads: its limit is 256 positions "
                                         r"\(config\.(max_position_embeddings|n_positions)\)"):
        sp.hf(model, tokenizer=tok, max_length=257)


def test_a_folder_without_tokenizer_files_is_refused_naming_them(tmp_path):
    tiny_gpt2(270, head=True).save_pretrained(tmp_path)
    with pytest.raises(ValueError, match=r"holds no tokenizer files \(none of tokenizer_config.json, tokenizer.json"):
        sp.hf(str(tmp_path))
    empty = transformers.AutoTokenizer.from_pretrained(str(tmp_path))   # what transformers builds from it
    with pytest.raises(ValueError, match="gives no token ids for text"):
        sp.hf(tiny_gpt2(270), tokenizer=empty)


def test_token_ids_beyond_the_vocabulary_are_a_named_error():
    bpe = small_bpe(TEXTS, vocab=300)
    small = sp.hf(tiny_gpt2(vocab=200), tokenizer=bpe)
    report = sp.compare(small, small, "h.1", sp.text_data(TEXTS), metrics=["cka-linear"])
    assert "but GPT2Model has 200 token embeddings (ids 0 to 199)" in report.results[0].error
    assert "use the tokenizer the model was trained with" in report.results[0].error


def test_a_dual_encoder_is_wrapped_one_tower_at_a_time():
    tok = byt5()
    config = transformers.CLIPConfig(
        text_config=dict(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=2, max_position_embeddings=64, bos_token_id=None, eos_token_id=1,
                         pad_token_id=0),
        vision_config=dict(image_size=16, patch_size=8, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                           num_attention_heads=2), projection_dim=16)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        clip = transformers.CLIPModel(config).eval()
    with pytest.raises(ValueError, match=r"CLIPModel embeds text and images with two towers.*tower='text' "
                                         r"\(model.text_model\) or tower='vision' \(model.vision_model\)"):
        sp.hf(clip, tokenizer=tok)
    text = sp.hf(clip, tokenizer=tok, tower="text", pooling="last")
    assert text.hf_model is clip.text_model and sp.layers(text)[-1] == "encoder.layers.1"   # the tower's own names
    vision = sp.hf(clip, tower="vision", pooling="first")
    assert vision.hf_model is clip.vision_model and not vision.reads_text
    images = torch.rand(len(TEXTS), 3, 16, 16, generator=torch.Generator().manual_seed(0))
    report = sp.compare(vision, text, [(sp.layers(vision)[-1], sp.layers(text)[-1])],
                        sp.paired_data({"image": images, "text": TEXTS}), metrics=["cka-linear"])
    assert report.results[0].ok
    with pytest.raises(ValueError, match="has no text tower"):
        sp.hf(tiny_gpt2(len(tok)), tokenizer=tok, tower="text")
    with pytest.raises(ValueError, match=r"tower must be one of text, vision"):
        sp.hf(clip, tokenizer=tok, tower="txt")


def test_a_text_file_with_a_byte_order_mark_reads_without_it(tmp_path):
    from similarity_plugins.datasets import parse_data_spec

    path = tmp_path / "bom.txt"
    path.write_bytes("\ufefffirst line\nsecond line\n".encode("utf-8"))
    texts = parse_data_spec(f"text:{path}").test.texts
    assert texts == ["first line", "second line"]


def test_hf_specs_read_a_revision_after_the_id(tmp_path):
    from similarity_plugins.apps.zoo import split_model_spec

    expected = ("hf", "org/name", {"pooling": "last", "revision": "step3000"}, None)
    assert split_model_spec("hf:org/name@step3000?pooling=last") == expected
    assert split_model_spec("hf:org/name?pooling=last@step3000") == expected
    assert split_model_spec("hf:org/name") == ("hf", "org/name", {}, None)
    folder = tmp_path / "run@2"
    folder.mkdir()
    assert split_model_spec(f"hf:{folder}?view=caption") == ("hf", str(folder), {"view": "caption"}, None)
    with pytest.raises(ValueError, match="without a revision"):
        split_model_spec("hf:org/name@")
    with pytest.raises(ValueError, match="gives the revision twice"):
        split_model_spec("hf:org/name@v1?revision=v2")
    with pytest.raises(ValueError, match=r"unknown option 'pooing' for hf:ID; did you mean 'pooling'"):
        build_model("hf:org/name?pooing=last")
