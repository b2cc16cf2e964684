"""mkdocs hook: the home page is README.md itself, and the tables that describe the metrics are generated.

- README links its pages as ``docs/NAME.md`` and its images as ``docs/NAME.png``, which work on GitHub; on the
  site the home page sits inside ``docs/``, so those prefixes are dropped. Nothing else in the text changes.
- A page line ``<!-- generated: NAME -->`` is replaced at build time by the table NAME makes: ``metric-list``
  (every registered metric's kind, range, symmetry, invariances and needed splits), ``metric-options`` (one
  table per metric: option, default, what it does, the values its type takes), ``iri-options`` and
  ``iri-tuning`` (the IRI options and tuning keys, with each preset's values, from the package) or ``speed``
  (the saved benchmark run docs/results/bench-small.json). The metric tables come from ``metric_info()`` of the
  registered metrics of this package (third-party plugins installed where the site is built are left out), so a
  new built-in metric or option appears on the pages by itself.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

_DOCS_LINK = re.compile(r"\]\(docs/")
_GENERATED = re.compile(r"^<!-- generated: (?P<name>[\w-]+) -->$", re.M)
_DOCS = Path(__file__).resolve().parent
PACKAGE = "similarity-plugins"


def readme_as_home(text: str) -> str:
    """README.md's text with its ``](docs/...)`` links and images made relative to ``docs/``."""
    return _DOCS_LINK.sub("](", text)


def _cell(value: object) -> str:
    text = "None" if value is None else repr(value) if not isinstance(value, str) else value
    return text.replace("|", "\\|").replace("\n", " ")


def _values(info, key: str) -> str:
    """What a value of the option ``key`` must be: its declared type in its rule's words ("any" when unchecked)."""
    rule = info.option_types.get(key)
    return "any" if rule is None else _cell(rule.words)


def _range(bounds) -> str:
    return "unbounded" if bounds is None else f"[{bounds[0]:g}, {bounds[1]:g}]"


def builtin_metrics() -> list[str]:
    """The names of the registered metrics that this package itself provides, sorted."""
    import similarity_plugins as sp

    return [name for name in sp.list_metrics() if sp.metric_info(name).package == PACKAGE]


def metric_list() -> str:
    """The Markdown table of every built-in metric: kind, range, symmetry, invariances, needed splits."""
    import similarity_plugins as sp

    rows = ["| metric | kind | range | symmetric | invariances (defaults) | needs |", "|---|---|---|---|---|---|"]
    for name in builtin_metrics():
        info = sp.metric_info(name)
        symmetric = "yes" if info.symmetric else "no" if info.symmetric is not None else "?"
        rows.append(f"| [`{name}`](options.md#{name}) | {info.kind or '?'} | {_range(info.range)} | {symmetric} | "
                    f"{', '.join(info.invariances or ()) or 'none declared'} | "
                    f"{', '.join(info.needs) if info.needs else 'any'} |")
    return "\n".join(rows)


def _iri_slm_info():
    """``metric_info("iri-slm")``: the invariance-aware metrics declare their ``iri_*`` options alike."""
    import similarity_plugins as sp

    return sp.metric_info("iri-slm")


def _shared_iri_options() -> dict:
    """The ``iri_*`` options every invariance-aware metric declares alike (the table of iris.md lists them once)."""
    info = _iri_slm_info()
    return {key: (default, info.option_docs.get(key, "")) for key, default in info.options.items()
            if key.startswith("iri_")}


def metric_options() -> str:
    """One section per registered metric: its description and a table of its options (default, doc). The ``iri_*``
    options that the ``iri-*`` metrics share are a link to their one table on the IRIs page, not four copies."""
    import similarity_plugins as sp

    shared = _shared_iri_options()
    parts = []
    for name in builtin_metrics():
        info = sp.metric_info(name)
        parts.append(f"### `{name}` {{#{name}}}\n\n{info.description}\n")
        if not info.options:
            parts.append("No options.\n")
            continue
        own = {key: default for key, default in info.options.items()
               if shared.get(key) != (default, info.option_docs.get(key, ""))}
        rows = ["| option | default | what it sets | values |", "|---|---|---|---|"]
        rows += [f"| `{key}` | `{_cell(default)}` | {_cell(info.option_docs.get(key, ''))} | {_values(info, key)} |"
                 for key, default in own.items()]
        parts.append("\n".join(rows) + "\n")
        if len(own) < len(info.options):
            parts.append(f"And the {len(info.options) - len(own)} IRI options (`iri_steps`, `iri_tol`, ...) that "
                         "every `iri-*` metric takes: [IRIs: Options](iris.md#options).\n")
    return "\n".join(parts)


def speed(path: Path = _DOCS / "results" / "bench-small.json") -> str:
    """The speed page's table from a saved ``similarity-plugins bench --json`` run (pytest-benchmark's JSON).

    One row per metric and workload: median and fastest round in seconds, rounds, the last round's score;
    then the CPU and Python the run reports.
    """
    run = json.loads(path.read_text(encoding="utf-8"))
    rows = ["| metric | workload | layer | median (s) | fastest (s) | rounds | score |",
            "|---|---|---|---:|---:|---:|---:|"]
    for bench in sorted(run["benchmarks"], key=lambda b: (b["extra_info"]["workload"], b["stats"]["median"])):
        info, stats = bench["extra_info"], bench["stats"]
        score = "error" if info.get("error") else f"{info['score']:.4f}"
        rows.append(f"| `{info['metric']}` | {info['workload']} | `{info['layer']}` | {stats['median']:.3f} | "
                    f"{stats['min']:.3f} | {stats['rounds']} | {score} |")
    machine = run["machine_info"]
    cpu = machine["cpu"]
    rows.append(f"\n{cpu['brand_raw']} ({cpu['count']} cores, {cpu['arch']}), {machine['system']}, Python "
                f"{machine['python_version']}, pytest-benchmark {run['version']}; "
                f"[the saved run]({path.name}) (`{path.name}`).")
    return "\n".join(rows)


def iri_options() -> str:
    """The table of the ``iri_*`` options of the invariance-aware metrics: default and doc, from ``metric_info``."""
    info = _iri_slm_info()
    rows = ["| option | default | what it does | values |", "| --- | --- | --- | --- |"]
    rows += [f"| `{key}` | `{_cell(default)}` | {_cell(info.option_docs.get(key, ''))} | {_values(info, key)} |"
             for key, default in info.options.items() if key.startswith("iri_")]
    return "\n".join(rows)


def _per_preset(key: str) -> str:
    """``key``'s value in the presets: the most common one, then each other value with the presets that use it."""
    from similarity_plugins.iri import PRESETS

    groups: dict[str, tuple[object, list[str]]] = {}
    for name, preset in PRESETS.items():
        if key in preset:
            groups.setdefault(repr(preset[key]), (preset[key], []))[1].append(f"`{name}`")
    if not groups:
        return "-"
    (common, _), *rest = sorted(groups.values(), key=lambda group: -len(group[1]))
    return "; ".join([_cell(common)] + [f"{', '.join(names)} {_cell(value)}" for value, names in rest])


def iri_tuning() -> str:
    """The table of the IRI tuning keys: each one's value in every preset, and its doc (``iri.settings``)."""
    from similarity_plugins.iri.settings import TUNING, TUNING_DOCS

    rows = ["| key | default per preset | what it does |", "| --- | --- | --- |"]
    for key in TUNING:
        default = "chosen by `auto`" if key == "preset" else _per_preset(key)
        rows.append(f"| `{key}` | {default} | {_cell(TUNING_DOCS.get(key, ''))} |")
    rows.append(f"| `cycle_steps` (the option `iri_cycle_steps`, not a tuning key) | {_per_preset('cycle_steps')} | "
                "Adam: the first restart cycle in steps (0: one cosine over the budget) |")
    return "\n".join(rows)


GENERATORS = {"metric-list": metric_list, "metric-options": metric_options, "speed": speed,
              "iri-options": iri_options, "iri-tuning": iri_tuning}


def expand_generated(markdown: str) -> str:
    """``markdown`` with every ``<!-- generated: NAME -->`` line replaced by the table NAME makes."""
    def fill(match: re.Match) -> str:
        if match["name"] not in GENERATORS:
            raise ValueError(f"unknown generated table {match['name']!r}; known: {sorted(GENERATORS)}")
        return GENERATORS[match["name"]]()

    return _GENERATED.sub(fill, markdown)


def on_files(files, config):
    from mkdocs.structure.files import File  # here, not at the top: the page tests use the generators without mkdocs

    readme = Path(config["config_file_path"]).parent / "README.md"
    files.append(File.generated(config, "index.md", content=readme_as_home(readme.read_text(encoding="utf-8"))))
    return files


def on_page_markdown(markdown, page, config, files):
    return expand_generated(markdown)
