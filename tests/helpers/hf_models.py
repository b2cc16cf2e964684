"""Tiny transformers models, tokenizers that need no files, and text that ships with Python (nothing fetched)."""

from __future__ import annotations

import codecs
import contextlib
import io

import torch

transformers = __import__("pytest").importorskip("transformers")


def zen_lines() -> list[str]:
    """The 19 lines of the Zen of Python (the standard library's ``this`` module, ROT13 in its source)."""
    with contextlib.redirect_stdout(io.StringIO()):
        import this
    text = codecs.decode(this.s, "rot13")
    return [line for line in text.splitlines()[2:] if line.strip()]


def byt5():
    """A byte-level tokenizer (259 ids + pad/eos/unk) with EOS appended to every text."""
    return transformers.ByT5Tokenizer()


def small_bpe(texts: list[str], vocab: int = 300):
    """A BPE tokenizer trained here on ``texts`` (no files, no downloads); pads with ``<pad>``, adds no specials."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=vocab, special_tokens=["<pad>", "<unk>", "<eos>"],
                                                        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    return transformers.PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", unk_token="<unk>",
                                                eos_token="<eos>")


def _seeded(build, seed: int):
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return build().eval()


def tiny_gpt2(vocab: int = 270, seed: int = 0, head: bool = False):
    config = transformers.GPT2Config(vocab_size=vocab, n_embd=32, n_layer=2, n_head=2, n_positions=256,
                                     bos_token_id=None, eos_token_id=None)
    return _seeded(lambda: (transformers.GPT2LMHeadModel if head else transformers.GPT2Model)(config), seed)


def tiny_llama(vocab: int = 270, seed: int = 1, head: bool = True):
    config = transformers.LlamaConfig(vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                      num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=256,
                                      bos_token_id=None, eos_token_id=None, pad_token_id=None)
    return _seeded(lambda: (transformers.LlamaForCausalLM if head else transformers.LlamaModel)(config), seed)


def tiny_bert(vocab: int = 270, seed: int = 2):
    config = transformers.BertConfig(vocab_size=vocab, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                     intermediate_size=64, max_position_embeddings=256, pad_token_id=0)
    return _seeded(lambda: transformers.BertModel(config), seed)


def tiny_vit(seed: int = 3):
    config = transformers.ViTConfig(image_size=16, patch_size=8, hidden_size=32, num_hidden_layers=2,
                                    num_attention_heads=2, intermediate_size=64)
    return _seeded(lambda: transformers.ViTModel(config), seed)


def hub_cache(home, repo_id: str, folder, commit: str, refs: tuple[str, ...] = ("main",)) -> str:
    """Lay out the files of ``folder`` (a ``save_pretrained`` folder) as ``huggingface_hub`` keeps a download of
    ``repo_id`` at ``commit`` under ``home`` (an ``HF_HOME``): ``hub/models--ORG--NAME/blobs/<sha256>``,
    ``snapshots/<commit>/<file>`` linking to its blob, and ``refs/<ref>`` holding the commit for each of ``refs``.
    Several calls with other commits give a repository with several revisions. Returns the commit."""
    import hashlib
    import os
    from pathlib import Path

    repo = Path(home) / "hub" / ("models--" + repo_id.replace("/", "--"))
    snapshot = repo / "snapshots" / commit
    for part in (repo / "blobs", snapshot, repo / "refs"):
        part.mkdir(parents=True, exist_ok=True)
    for file in sorted(Path(folder).iterdir()):
        data = file.read_bytes()
        blob = repo / "blobs" / hashlib.sha256(data).hexdigest()
        blob.write_bytes(data)
        os.symlink(os.path.relpath(blob, snapshot), snapshot / file.name)
    for ref in refs:
        (repo / "refs" / ref).write_text(commit)
    return commit


def offline_hub(monkeypatch, home) -> None:
    """Point ``huggingface_hub`` (and through it transformers) at the cache under ``home`` and switch the hub off,
    as ``HF_HOME=home HF_HUB_OFFLINE=1`` would for a new process: no request leaves the machine."""
    from huggingface_hub import constants

    monkeypatch.setenv("HF_HOME", str(home))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HOME", str(home))
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(home / "hub"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)


_NO_IDS = dict(bos_token_id=None, eos_token_id=None)


def tiny_opt(vocab: int = 270, seed: int = 4):
    config = transformers.OPTConfig(vocab_size=vocab, hidden_size=32, num_hidden_layers=2, ffn_dim=64,
                                    num_attention_heads=2, max_position_embeddings=256, word_embed_proj_dim=32,
                                    pad_token_id=0, **_NO_IDS)
    return _seeded(lambda: transformers.OPTModel(config), seed)


def tiny_bloom(vocab: int = 270, seed: int = 5):
    config = transformers.BloomConfig(vocab_size=vocab, hidden_size=32, n_layer=2, n_head=2, pad_token_id=0, **_NO_IDS)
    return _seeded(lambda: transformers.BloomModel(config), seed)


def tiny_gpt_neo(vocab: int = 270, seed: int = 6):
    config = transformers.GPTNeoConfig(vocab_size=vocab, hidden_size=32, num_layers=2, num_heads=2,
                                       attention_types=[[["global", "local"], 1]], max_position_embeddings=256,
                                       window_size=256, **_NO_IDS)
    return _seeded(lambda: transformers.GPTNeoModel(config), seed)


def tiny_bart_decoder(vocab: int = 270, seed: int = 7):
    """A BART decoder as a causal LM: its learned positions count from the first token, it takes no position ids."""
    config = transformers.BartConfig(vocab_size=vocab, d_model=32, decoder_layers=2, encoder_layers=2,
                                     decoder_attention_heads=2, encoder_attention_heads=2, decoder_ffn_dim=64,
                                     encoder_ffn_dim=64, max_position_embeddings=256, pad_token_id=0,
                                     decoder_start_token_id=None, forced_eos_token_id=None, **_NO_IDS)
    return _seeded(lambda: transformers.BartForCausalLM(config), seed)


def tiny_t5_encoder(vocab: int = 270, seed: int = 8):
    """A T5 encoder: relative positions, no position ids, and one dropout module that runs twice per forward."""
    config = transformers.T5Config(vocab_size=vocab, d_model=32, d_kv=16, d_ff=64, num_layers=2, num_heads=2,
                                   pad_token_id=0, eos_token_id=None, decoder_start_token_id=0)
    return _seeded(lambda: transformers.T5EncoderModel(config), seed)


def tiny_xglm(vocab: int = 270, seed: int = 9):
    config = transformers.XGLMConfig(vocab_size=vocab, d_model=32, num_layers=2, attention_heads=2, ffn_dim=64,
                                     max_position_embeddings=256, pad_token_id=0, **_NO_IDS)
    return _seeded(lambda: transformers.XGLMModel(config), seed)


def tiny_roberta(vocab: int = 270, seed: int = 10):
    """RoBERTa counts its positions from ``padding_idx + 1`` (here 1), not from 0."""
    config = transformers.RobertaConfig(vocab_size=vocab, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                        intermediate_size=64, max_position_embeddings=258, pad_token_id=0)
    return _seeded(lambda: transformers.RobertaModel(config), seed)


#: Every architecture the text tests cover, each built from a config: name -> builder(vocab).
ARCHITECTURES = {
    "gpt2": lambda v: tiny_gpt2(v), "llama": lambda v: tiny_llama(v, head=False), "bert": lambda v: tiny_bert(v),
    "opt": tiny_opt, "bloom": tiny_bloom, "gpt-neo": tiny_gpt_neo, "bart-decoder": tiny_bart_decoder,
    "t5-encoder": tiny_t5_encoder, "xglm": tiny_xglm, "roberta": tiny_roberta,
}
