"""Text grids: our extraction + CKA grid of two language models vs a plain transformers loop, on mixed lengths.

Run from the repository root: ``python -m pytest benchmarks/bench_text_grid.py --benchmark-only`` (autosaved to
``.benchmarks/``). ``BENCH_TEXT_N`` sets the number of texts (default 2048), ``BENCH_TEXT_ROUNDS`` the rounds of
each (default 5: the models' forward passes vary from round to round).

Group ``text-grid-N{N}``: a GPT-2 (6 blocks, width 64) against a Llama-style model (6 blocks, width 64), random
weights (seeded), the ByT5 byte tokenizer (no files; one token a byte, plus EOS), N texts of 5 to 200 tokens
(lengths uniform, words of the Zen of Python), every layer (embedding output and the 6 blocks: 7 x 7 cells),
mean pooling over the real tokens.
  * ours    ``compare_grid`` of ``sp.hf`` wrappers on ``sp.text_data`` with ``cka-linear`` (pairs across): text
            batched by length, at most 8,192 padded tokens a batch
  * plain   per model, batches of 64 texts in the data's order, ``model(**batch, output_hidden_states=True)``, a
            masked mean of each hidden state, then a float64 linear CKA (feature space) for each of the 49 pairs
``extra_info`` holds ``ours_over_plain`` (ratio of medians), ``tokens_per_second`` (the real tokens both models
read, over the median time), the largest difference between the two matrices (the plain loop's last entry has
the final norm applied, so only the first 6 x 6 cells are compared) and the peak resident memory of a fresh
process running each (``peak_rss_mib``, ``increase_mib`` over the process before it).
"""

from __future__ import annotations

import codecs
import contextlib
import io
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import ratios
import torch
import transformers

import similarity_plugins as sp

N = int(os.environ.get("BENCH_TEXT_N", "2048"))
BATCH = 64
BLOCKS = 6
ROUNDS = int(os.environ.get("BENCH_TEXT_ROUNDS", "5"))
GROUP = f"text-grid-N{N}"
_VALUES: dict[str, object] = {}


def texts(n: int = N) -> list[str]:
    """``n`` texts of 4 to 199 characters (5 to 200 ByT5 tokens with EOS), lengths uniform, words drawn (seeded)
    from the Zen of Python's."""
    with contextlib.redirect_stdout(io.StringIO()):
        import this
    words = codecs.decode(this.s, "rot13").split()
    rng = np.random.default_rng(0)
    out = []
    for length in rng.integers(4, 200, size=n):
        text = ""
        while len(text) <= length:
            text += str(rng.choice(words)) + " "
        out.append(text[:length].strip().ljust(length, "."))
    return out


def models() -> tuple[transformers.ByT5Tokenizer, torch.nn.Module, torch.nn.Module]:
    tok = transformers.ByT5Tokenizer()
    ids = dict(bos_token_id=None, eos_token_id=None, pad_token_id=None)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        gpt = transformers.GPT2Model(transformers.GPT2Config(vocab_size=len(tok), n_embd=64, n_layer=BLOCKS,
                                                             n_head=4, **ids)).eval()
        llama = transformers.LlamaModel(transformers.LlamaConfig(
            vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=BLOCKS,
            num_attention_heads=4, num_key_value_heads=4, **ids)).eval()
    return tok, gpt, llama


def ours(tok, gpt, llama, sentences: list[str]) -> np.ndarray:
    a, b = sp.hf(gpt, tokenizer=tok), sp.hf(llama, tokenizer=tok)
    grid = sp.compare_grid({"a": a, "b": b}, {"a": sp.layers(a), "b": sp.layers(b)}, sp.text_data(sentences),
                           metrics=["cka-linear"], pairs="across")
    return grid.matrix("cka-linear", "a", "b")


def _linear_cka(x: np.ndarray, y: np.ndarray) -> float:
    x, y = x - x.mean(0), y - y.mean(0)
    return float(np.linalg.norm(y.T @ x) ** 2 / (np.linalg.norm(x.T @ x) * np.linalg.norm(y.T @ y)))


def _pooled(tok, model, sentences: list[str]) -> list[np.ndarray]:
    rows = []
    with torch.no_grad():
        for i in range(0, len(sentences), BATCH):
            batch = tok(sentences[i:i + BATCH], padding=True, return_tensors="pt")
            hidden = model(**batch, output_hidden_states=True).hidden_states
            mask = batch["attention_mask"].unsqueeze(-1).float()
            rows.append([((h * mask).sum(1) / mask.sum(1)).numpy() for h in hidden])
    return [np.concatenate(parts).astype(np.float64) for parts in zip(*rows)]


def plain(tok, gpt, llama, sentences: list[str]) -> np.ndarray:
    xs, ys = _pooled(tok, gpt, sentences), _pooled(tok, llama, sentences)
    return np.array([[_linear_cka(x, y) for y in ys] for x in xs])


@pytest.fixture(scope="module")
def setup():
    return (*models(), texts())


@pytest.fixture(scope="module", autouse=True)
def _report(request):
    yield
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    capman = request.config.pluginmanager.get_plugin("capturemanager")
    if _VALUES and reporter is not None and capman is not None:
        with capman.global_and_fixture_disabled():
            reporter.write_line("")
            reporter.write_line(f"[bench_text_grid] {json.dumps(_VALUES)}")


def _run(name: str, fn, benchmark, setup) -> None:
    benchmark.group = GROUP
    matrix = benchmark.pedantic(fn, args=setup, rounds=ROUNDS, iterations=1, warmup_rounds=1)
    _VALUES[name] = matrix
    ratios.record(name, benchmark)
    tokens = 2 * sum(len(t) + 1 for t in setup[-1])   # both models read every byte and an EOS
    benchmark.extra_info["tokens_per_second"] = round(tokens / ratios.median_seconds(name))
    _VALUES[f"{name}_tokens_per_second"] = benchmark.extra_info["tokens_per_second"]
    if ratios.share_ratio("ours_over_plain", "ours", "plain") is not None:
        cells = BLOCKS
        diff = float(np.abs(_VALUES["ours"][:cells, :cells] - _VALUES["plain"][:cells, :cells]).max())
        _VALUES.update(ours_over_plain=ratios.RUNS["ours"].extra_info["ours_over_plain"], max_abs_diff=diff)
        del _VALUES["ours"], _VALUES["plain"]
        for variant in ("ours", "plain"):
            ratios.RUNS[variant].extra_info[f"max_abs_diff_{cells}x{cells}"] = diff
    memory = _peak_memory(name)
    benchmark.extra_info.update(memory)
    _VALUES[f"{name}_memory"] = memory


def test_ours(benchmark, setup):
    _run("ours", ours, benchmark, setup)


def test_plain(benchmark, setup):
    _run("plain", plain, benchmark, setup)


_MEMORY_SCRIPT = """
import sys, json, torch
sys.path.insert(0, "benchmarks")
import bench_text_grid as b

def status(key):
    with open("/proc/self/status") as fh:
        return next(int(line.split()[1]) for line in fh if line.startswith(key))

tok, gpt, llama = b.models()
sentences = b.texts()
with open("/proc/self/clear_refs", "w") as fh:  # reset the peak (VmHWM) to the resident set now
    fh.write("5")
base = status("VmRSS:")
b.{name}(tok, gpt, llama, sentences)
print(json.dumps({{"base_kib": base, "peak_kib": status("VmHWM:")}}))
"""


def _peak_memory(name: str) -> dict:
    """Peak resident memory (MiB) of a fresh process running ``name`` once, and its increase over the start."""
    out = subprocess.run([sys.executable, "-c", _MEMORY_SCRIPT.format(name=name)], capture_output=True, text=True,
                         timeout=600, check=True, env={**os.environ, "PYTHONPATH": os.getcwd()})
    got = json.loads(out.stdout.strip().splitlines()[-1])
    return {"peak_rss_mib": round(got["peak_kib"] / 1024, 1),
            "increase_mib": round((got["peak_kib"] - got["base_kib"]) / 1024, 1)}
