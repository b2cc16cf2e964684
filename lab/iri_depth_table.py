"""Markdown table from ``lab/iri_depth_study.py --json`` files: one row per (case, variant).

    python lab/iri_depth_table.py study.jsonl [more.jsonl ...] [--variants default,adam]
"""

from __future__ import annotations

import argparse
import json
import math


def row(case: str, name: str, plain: dict, r: dict) -> str:
    """One Markdown table row comparing variant ``r`` with the best ``plain`` loop."""
    reached = math.isfinite(plain["steps_to_1e-2"])
    plain_steps = (f"{plain['steps_to_1e-2']:.0f}" if reached
                   else f"never ({plain['total_steps']:.0f}, final median {plain['median']:.4f})")
    ours = f"{r['steps_to_1e-2']:.0f}" if math.isfinite(r["steps_to_1e-2"]) else "never"
    ratio = lambda key: f"{r[key]:.2f}" if r.get(key) and ours != "never" else "-"  # noqa: E731
    if name == "default" and r.get("optimizer"):
        name = f"auto -> {r['optimizer']}"
    return (f"| {case} | {name} | {plain['lr']} | {plain_steps} | {ours} | {ratio('wall_ratio')} | {ratio('work_ratio')} | "
            f"{r['converged']:.2f} ({plain['converged']:.2f}) | {r['median']:.4f} / {r['p95']:.4f} | "
            f"{r['seed_distance']:.3f} / {plain['seed_distance']:.3f} |")


def main(argv: list[str] | None = None) -> None:
    """Print the table for every record of the given files."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("files", nargs="+")
    p.add_argument("--variants", default=None)
    args = p.parse_args(argv)
    wanted = set(args.variants.split(",")) if args.variants else None
    print("| architecture / layer | ours | plain best lr | plain steps to median 1e-2 | ours steps | wall ratio | "
          "sample-step ratio | converged ours (plain) | ours median / p95 | seed distance ours / plain |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for path in args.files:
        with open(path) as fh:
            for line in fh:
                rec = json.loads(line)
                if "plain" not in rec:
                    continue
                for name, r in rec.items():
                    if isinstance(r, dict) and "converged" in r and name != "plain" and (wanted is None or name in wanted):
                        print(row(rec["case"] + (" (plain stored)" if rec.get("plain_stored") else ""), name,
                                  rec["plain"], r))


if __name__ == "__main__":
    main()
