"""Why does the clean pair fall at block4 under IRIs in the shortcut study, and what keeps it up?

Runs the quick shortcut study at block4 only, varying one thing at a time: more robust donors (PGD eps
0.2 instead of 0.1), IRIs started from another training image (``iri_init="shuffle"``), a tighter IRI
tolerance (0.01 instead of 0.02, 2,000 steps), and seeds (3 stitch/IRI seeds with ``repeats``). Prints
iri-slm clean -> clean and clean -> shortcut with their intervals. Usage (about 10 minutes on 2 cores):

    PYTHONPATH=. python lab/shortcut_block4.py OUT_DIR [VARIANT ...]

VARIANT: a key of :data:`VARIANTS` (default: all).
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import replace

from similarity_plugins.apps.studies.common import DonorPool, ci_text
from similarity_plugins.apps.studies.shortcut import DemoConfig, run_demo

VARIANTS = {
    "baseline (quick)": {},
    "iri_init=shuffle": {"iri_init": "shuffle"},
    "iri_tol=0.01, 2000 steps": {"iri_tol": 1e-2, "iri_steps": 2000},
    "3 seeds (repeats)": {"repeats": 3},
    "PGD eps 0.2": {"pgd_eps": 0.2},
}


def main(out_dir: str, names: list[str] | None = None) -> dict:
    pool = DonorPool()
    base = replace(DemoConfig.quick(), layers=["block4"])
    table = {}
    for name in names or list(VARIANTS):
        change = VARIANTS[name]
        began = time.perf_counter()
        result = run_demo(f"{out_dir}/{name.split()[0].replace('=', '-')}", config=replace(base, **change), progress="never",
                          donors=pool)
        reports = result["reports"]
        row = {pair: ci_text(rep.get("iri-slm", "block4")) for pair, rep in reports.items()}
        row.update({f"std {pair}": ci_text(rep.get("stitch-slm", "block4")) for pair, rep in reports.items()})
        cc = reports["clean -> clean"].get("iri-slm", "block4") if "block4" not in result["dropped"] else None
        row["iri median error"] = None if cc is None else round(cc.details["iri_median_error"], 4)
        row["seed distance"] = None if cc is None else round(cc.details["iri_mean_seed_distance"], 3)
        row["seconds"] = round(time.perf_counter() - began)
        table[name] = row
        print(json.dumps({name: row}), flush=True)
    return table


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1] if len(sys.argv) > 1 else "shortcut-block4", sys.argv[2:] or None), indent=1))
