"""``similarity-plugins study unseen-cue``: excess agreement from a label-coded cue neither donor saw.

Pairs of donors are trained on plain digits (several donor seeds). The stitch is trained on digits that
carry a faint label-coded border (`UnseenCue`); its excess agreement
is its agreement with the end model on cue-carrying test digits minus that on the same digits without
the cue (`excess_agreement`). The paper reports that standard
stitching exploits such a cue and invariance-aware stitching nearly removes the excess. The study reports
each metric's mean excess over donor pairs with a 95% interval over donor pairs, the paired difference
(standard minus invariance-aware) with its interval, and CKA with and without the cue; it writes
``report.json``, ``report.csv`` and ``excess.png``, all or none.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field

import torch

from ...networks.data import Data
from ...runner.compare import compare
from ...runner.repeats import mean_interval
from ...utils.progress import Progress, check_progress
from .common import DonorPool, DonorSpec, begin_study, json_ready_text, say, study_options, write_study

METRICS = ("stitch-slm", "iri-slm")


@dataclass
class UnseenCueConfig:
    """Sizes of the unseen-cue study; ``quick()`` is the smaller run (fewer donor pairs, stitch epochs and IRI seeds)."""

    # strength 1.0 at block3/block4: where standard stitching's excess is large enough to read (docs/studies.md)
    layers: list[str] = field(default_factory=lambda: ["block3", "block4"])
    donor_pairs: int = 4
    strength: float = 1.0
    donor: DonorSpec = DonorSpec(width=16, epochs=6, pgd_eps=0.1, pgd_steps=3)
    stitch_epochs: int = 20
    stitch_batch: int = 128
    iri_seeds: int = 256
    iri_steps: int = 1000
    iri_tol: float = 2e-2
    iri_cycle_steps: int = 100

    @classmethod
    def quick(cls) -> UnseenCueConfig:
        return cls(donor_pairs=3, donor=DonorSpec(width=16, epochs=6, pgd_eps=0.1, pgd_steps=1), stitch_epochs=5,
                   stitch_batch=64, iri_seeds=64)

    def options(self) -> dict:
        """The stitch and IRI options (as in the demo)."""
        return study_options(self)


def measure_excess(cfg: UnseenCueConfig, seed: int, donors: DonorPool, progress: Progress = "never") -> list[dict]:
    """Excess agreement of each metric at each layer for each donor pair: a list of row dicts
    (``donor_seeds``, ``metric``, ``layer``, agreements with/without the cue, ``excess``, ``iri_median_error``),
    plus ``cka-linear`` rows with the CKA on cue-carrying and on plain test digits."""
    from ...datasets import UnseenCue, digits_data
    from ..experiments import excess_agreement

    data = digits_data(size=32, seed=seed)
    rows = []
    for i in range(cfg.donor_pairs):
        seeds = (seed + 2 * i, seed + 2 * i + 1)
        a, b = (donors.get(("digits-32", seed), data.train, cfg.donor, s, progress) for s in seeds)
        began = time.perf_counter()
        for r in excess_agreement(a, b, cfg.layers, data, METRICS, strength=cfg.strength, seed=seed,
                                  options=cfg.options(), progress=progress):
            rows.append({"donor_seeds": list(seeds), **r.to_dict()})
        cue_test = UnseenCue(data.test, seed=seed + 1, strength=cfg.strength)
        with_cue = compare(a, b, cfg.layers, Data(test=cue_test), "cka-linear")
        without = compare(a, b, cfg.layers, Data(test=data.test), "cka-linear")
        for layer in cfg.layers:
            rows.append({"donor_seeds": list(seeds), "metric": "cka-linear", "layer": layer,
                         "cka_with_cue": with_cue["cka-linear", layer].score,
                         "cka_without_cue": without["cka-linear", layer].score})
        say(f"  donors {seeds[0]} -> {seeds[1]}: done in {time.perf_counter() - began:.0f} s")
    return rows


def summarise(rows: list[dict], layers: list[str]) -> dict:
    """Per layer: each metric's mean excess with a 95% interval over donor pairs, and the paired difference
    standard minus invariance-aware (``difference``) with its interval; values are agreement fractions."""
    out: dict[str, dict] = {}
    for layer in layers:
        per = {m: {tuple(r["donor_seeds"]): r for r in rows if r["metric"] == m and r["layer"] == layer} for m in METRICS}
        entry = {}
        for metric in METRICS:
            values = [r["excess"] for r in per[metric].values()]
            entry[metric] = {"excess": values, "mean": sum(values) / len(values), "ci95": list(mean_interval(values)),
                             "mean_abs": sum(abs(v) for v in values) / len(values), "spread": max(values) - min(values)}
        common = sorted(set(per[METRICS[0]]) & set(per[METRICS[1]]))
        diffs = [per[METRICS[0]][k]["excess"] - per[METRICS[1]][k]["excess"] for k in common]
        entry["difference"] = {"values": diffs, "mean": sum(diffs) / len(diffs), "ci95": list(mean_interval(diffs))}
        errors = [r["iri_median_error"] for r in per["iri-slm"].values() if r.get("iri_median_error") is not None]
        entry["iri_median_error_max"] = max(errors) if errors else None
        out[layer] = entry
    return out


def explain_excess(summary: dict, tol: float) -> list[str]:
    """Sentences read from the measured excesses and intervals (never a canned conclusion)."""
    lines = []
    for layer, e in summary.items():
        std, iri, diff = e["stitch-slm"], e["iri-slm"], e["difference"]
        k = len(diff["values"])
        low, high = diff["ci95"]
        if low > 0:
            verdict = "the paper's direction holds: invariance-aware stitching has less excess, beyond the interval"
        elif diff["mean"] > 0:
            verdict = "invariance-aware stitching has less excess on average, but the interval includes zero"
        else:
            verdict = "the paper's direction does NOT hold here: invariance-aware stitching has as much excess or more"
        same_sign = all(v > 0 for v in diff["values"]) or all(v < 0 for v in diff["values"])
        sign = ("no pair differs" if all(v == 0 for v in diff["values"]) else
                "same sign for every pair" if same_sign else "the sign varies between pairs")
        err = e["iri_median_error_max"]
        quality = "" if err is None else f"; IRI median error up to {err:.3f}" + ("" if err <= tol else f" (above tol {tol:g})")
        lines.append(f"{layer}: excess agreement stitch-slm {std['mean']:+.3f} [{std['ci95'][0]:+.3f}, {std['ci95'][1]:+.3f}], "
                     f"iri-slm {iri['mean']:+.3f} [{iri['ci95'][0]:+.3f}, {iri['ci95'][1]:+.3f}]; difference "
                     f"{diff['mean']:+.3f} [{low:+.3f}, {high:+.3f}] over {k} donor pairs "
                     f"({sign}{quality}): {verdict}.")
        smaller = "smaller" if iri["mean_abs"] < std["mean_abs"] and iri["spread"] < std["spread"] else "not smaller"
        lines.append(f"{layer}: size of the excess, mean |excess| over pairs: stitch-slm {std['mean_abs']:.3f} (spread "
                     f"{std['spread']:.3f}), iri-slm {iri['mean_abs']:.3f} (spread {iri['spread']:.3f}): under IRIs the "
                     f"excess is {smaller}, whatever its sign.")
    return lines


def run_unseen_cue(out_dir: str = "study-unseen-cue", *, quick: bool = False, seed: int = 0, progress: Progress = "auto",
                   donors: DonorPool | None = None, config: UnseenCueConfig | None = None) -> dict:
    """Run the unseen-cue study (module docstring); returns ``{"rows", "summary", "files", "seconds", ...}``."""
    progress = check_progress(progress)
    cfg = config or (UnseenCueConfig.quick() if quick else UnseenCueConfig())
    start, donors = begin_study(out_dir, donors)
    say(f"study unseen-cue{' (quick)' if quick else ''}: {cfg.donor_pairs} pairs of PGD-robust SmallCNNs on digits, "
        f"stitches trained on digits with a label-coded border (strength {cfg.strength:g}) neither donor saw; "
        f"layers {', '.join(cfg.layers)}, seed {seed}")
    rows = measure_excess(cfg, seed, donors, progress)
    summary = summarise(rows, cfg.layers)
    explanation = explain_excess(summary, cfg.iri_tol)
    say("\n" + format_summary(summary))
    say("\nwhat this shows:")
    for line in explanation:
        say("  " + line)
    files = write_files(out_dir, cfg, seed, rows, summary, explanation)
    seconds = time.perf_counter() - start
    say(f"\nwrote {', '.join(files)} in {seconds:.0f} s")
    return {"rows": rows, "summary": summary, "explanation": explanation, "files": files, "seconds": seconds}


def write_files(out_dir: str, cfg: UnseenCueConfig, seed: int, rows: list[dict], summary: dict,
                explanation: list[str]) -> list[str]:
    """Write ``report.json``, ``report.csv`` and ``excess.png`` (from `measure_excess`'s ``rows`` and
    `summarise`'s ``summary``) into ``out_dir``, all or none; returns their paths."""
    payload = {"meta": {"study": "unseen-cue", "data": "sklearn digits 32x32", "seed": seed,
                        "config": {**asdict(cfg), "options": cfg.options()}, "torch": torch.__version__},
               "rows": rows, "summary": summary, "explanation": explanation}
    return write_study(out_dir, {"report.json": json_ready_text(payload), "report.csv": _csv(rows),
                                 "excess.png": excess_figure(summary)})


def format_summary(summary: dict) -> str:
    """A table: layer, mean excess of each metric and the paired difference, each with its 95% interval."""
    header = f"{'layer':<8} {'stitch-slm excess':>26} {'iri-slm excess':>26} {'difference':>26}"
    lines = [header, "-" * len(header)]
    cell = lambda e: f"{e['mean']:+.3f} [{e['ci95'][0]:+.3f}, {e['ci95'][1]:+.3f}]"  # noqa: E731
    for layer, e in summary.items():
        lines.append(f"{layer:<8} {cell(e['stitch-slm']):>26} {cell(e['iri-slm']):>26} {cell(e['difference']):>26}")
    return "\n".join(lines)


def _csv(rows: list[dict]) -> str:
    import csv
    import io

    columns = ["donor_seeds", "metric", "layer", "agreement_with_cue", "agreement_without_cue", "excess",
               "relative_accuracy_with_cue", "relative_accuracy_without_cue", "iri_median_error", "cka_with_cue",
               "cka_without_cue"]
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(columns)
    for r in rows:
        writer.writerow([" ".join(map(str, r["donor_seeds"]))] + ["" if r.get(c) is None else r[c] for c in columns[1:]])
    return buf.getvalue()


def excess_figure(summary: dict) -> bytes:
    """PNG bytes (120 dpi): excess agreement per layer of `summarise`'s ``summary``, one dot per donor pair
    and the mean with its 95% interval per metric (agreement fractions)."""
    from ...utils.figures import figure_bytes, pyplot

    plt = pyplot()
    layers = list(summary)
    fig, ax = plt.subplots(figsize=(1.8 + 1.6 * len(layers), 3.8))
    for j, metric in enumerate(METRICS):
        offset = (j - 0.5) * 0.3
        for x, layer in enumerate(layers):
            values = summary[layer][metric]["excess"]
            ax.scatter([x + offset] * len(values), values, s=14, alpha=0.5, color=f"C{j}")
            mean, (low, high) = summary[layer][metric]["mean"], summary[layer][metric]["ci95"]
            ax.errorbar(x + offset, mean, yerr=[[mean - low], [high - mean]], fmt="o", color=f"C{j}", capsize=4,
                        label=metric if x == 0 else None)
    ax.axhline(0, color="grey", linewidth=0.8)
    ax.set_xticks(range(len(layers)))
    ax.set_xticklabels(layers)
    ax.set_ylabel("excess agreement (with cue - without)")
    ax.set_title("unseen cue: mean and 95% interval over donor pairs", fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return figure_bytes(fig, "png", dpi=120)
