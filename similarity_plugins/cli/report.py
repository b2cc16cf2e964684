"""The ``report`` command: one self-contained HTML page of a result file the package wrote (a ``compare`` report,
a grid, or a study's ``report.json``); the page of ``Report.to_html`` and ``Grid.to_html``."""

from __future__ import annotations

import argparse
import os
import sys

from .arguments import add_output_args
from .outputs import resolve_outputs


def cmd_report(args: argparse.Namespace) -> int:
    from ..apps.report import read_result, write_html

    if args.out is None:
        args.out = os.path.splitext(os.fspath(args.result))[0] + ".html"
    resolve_outputs(args, ["--out"], {"RESULT": args.result})
    result, images, notes = read_result(args.result)
    text = write_html(result, args.out, title=args.title, images=images, notes=notes)  # MissingExtra: main says it
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    print(f"wrote {args.out} ({len(text.encode('utf-8')) / 1e6:.2f} MB; it opens without a network)")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add this module's command(s) to the ``similarity-plugins`` parser."""
    p = sub.add_parser("report", help="one self-contained HTML page of a result: charts, tables, provenance "
                                      "(RESULT.json of compare --out, grid --out, demo or study)")
    p.add_argument("result", metavar="RESULT.json",
                   help="a report (compare --out, Report.to_json), a grid (grid --out, Grid.to_json) or a study's "
                        "report.json (demo, study)")
    add_output_args(p, "the HTML file to write (default: RESULT with .html)", csv=None)
    p.add_argument("--title", default=None, help="the page's title (default: made from the result)")
    p.set_defaults(func=cmd_report)
