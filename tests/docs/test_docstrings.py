"""Every public docstring parses as the API reference renders it: griffe's Google parser (mkdocs.yml's
``docstring_style: google``), with griffe's own warnings turned into failures.

A NumPy-style section (``Parameters`` over ``----------``) is not a section to the Google parser: the reference
shows it as a run-on paragraph. Two arguments on one line (``X: ... Y: ...`` or ``a, b: ...``) give one table
row, and the second argument is lost. A reStructuredText ``::`` marker is printed as it is. Signatures show
their defaults as written, so a default read from a table (``RUN_DEFAULTS["steps"]``) shows the expression,
not the value, and a quoted annotation shows the quotes.
"""

from __future__ import annotations

import logging
import re
from functools import lru_cache

import griffe

from tests.helpers.repo import ROOT

UNDERLINE = re.compile(r"^\s*(-{3,}|={3,})\s*$", re.M)
RST_MARKER = re.compile(r"(?:^|\S)::\s*$", re.M)
TABLE_KINDS = {"parameters", "other parameters", "attributes", "raises", "warns"}


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@lru_cache(maxsize=1)
def package():
    return griffe.load("similarity_plugins", search_paths=[str(ROOT)], docstring_parser="google",
                       resolve_aliases=False)


def public_objects(obj=None) -> list:
    """Every module, class, function and attribute of the package whose name has no leading underscore
    (``__init__`` included: the reference merges it into its class), defined where it is found."""
    obj = obj if obj is not None else package()
    found = []
    for name, member in obj.members.items():
        if member.is_alias or (name.startswith("_") and name != "__init__"):
            continue
        found.append(member)
        if member.is_module or member.is_class:
            found.extend(public_objects(member))
    return found


def _names_in_table(section) -> set[str]:
    return {getattr(item, "name", "") or "" for item in section.value}


def docstring_problems(obj) -> list[str]:
    """What griffe's Google parser could not make a section or a row of, in one object's docstring."""
    if not obj.docstring:
        return []
    collect = _Collect()
    log = logging.getLogger("griffe")
    log.addHandler(collect)
    try:
        sections = obj.docstring.parse("google")
    finally:
        log.removeHandler(collect)
    problems = [f"griffe: {message}" for message in collect.messages]
    params = {p.name for p in getattr(obj, "parameters", [])} - {"self", "cls"}
    for section in sections:
        kind = section.kind.value
        if kind == "text":
            if UNDERLINE.search(section.value):
                problems.append("an underlined (NumPy or reST) heading: write Args:/Returns:/Raises: sections")
            if RST_MARKER.search(section.value):
                problems.append("a reST '::' marker: use a fenced code block or end the sentence with a colon")
            continue
        if kind in ("returns", "yields") and len(section.value) > 1:
            problems.append(f"{kind}: {len(section.value)} rows; indent the lines that continue the first")
        if kind == "returns" and getattr(obj, "returns", None) is not None \
                and str(section.value[0].annotation) != str(obj.returns):
            problems.append(f"returns: {section.value[0].annotation!r} read as the type (text before a colon)")
        if kind in TABLE_KINDS:
            for item in section.value:
                name, text = getattr(item, "name", "") or "", item.description or ""
                if kind in ("raises", "warns") and not re.fullmatch(r"[\w.]+", str(item.annotation or "")):
                    problems.append(f"{kind} row {item.annotation!r}: one exception per row, 'Type: when'")
                if "," in name:
                    problems.append(f"row {name!r}: one argument per row")
                others = (params or _names_in_table(section)) - {name}
                for other in others:
                    if re.search(rf"(?:^|[.;]\s+)(?:`*\w+`*,\s*)*`*{re.escape(other)}`*: ", text):
                        problems.append(f"row {name!r} also describes {other!r}: one argument per line")
    return problems


def reference_objects() -> list:
    """The objects the API reference renders: each ``::: path`` of docs/reference/, a class's members and a
    module's public members with them."""
    found = []
    for page in sorted((ROOT / "docs" / "reference").glob("*.md")):
        for path, options in re.findall(r"^::: (\S+)\n((?:[ \t]+\S.*\n)*)", page.read_text(encoding="utf-8"), re.M):
            obj = package() if path == "similarity_plugins" else package()[path.split(".", 1)[1]]
            obj = obj.final_target if obj.is_alias else obj
            found.append(obj)
            chosen = re.search(r"members:\s*\[([^\]]*)\]", options)
            if obj.is_class or obj.is_module:
                members = [m.final_target if m.is_alias else m for m in obj.members.values() if m.is_public]
                found += [m for m in members if not m.name.startswith("_")
                          and (chosen is None or m.name in re.findall(r"\w+", chosen.group(1)))]
    return found


def test_the_reference_shows_the_public_face_only():
    """No docstring the reference renders names a private name, a module constant of the runner or points to a
    module docstring the page does not show; the store's entry-writing steps are not methods of `Store`."""
    found = {}
    for obj in reference_objects():
        text = obj.docstring.value if obj.docstring else ""
        shown_module = obj.is_module   # a module's own docstring is on its page
        problems = re.findall(r"`+_[a-z]\w*`+", text) + re.findall(r"\bDEFAULT_PLUGINS\b", text)
        if not shown_module and re.search(r"module docstring", text):
            problems.append("points to a module docstring the page does not show")
        if problems:
            found[obj.path] = problems
    assert not found, found
    paths = {obj.path for obj in reference_objects()}
    for writing in ("key_folder", "found_chunks", "write_chunk", "write_samples", "finish"):
        assert f"similarity_plugins.store.store.Store.{writing}" not in paths, writing


def test_reference_pages_list_entry_points():
    """The reference names the objects the user pages use, and lists a package by its entry points, not by a
    directive that renders everything the package exports (internals included)."""
    paths = {obj.path for obj in reference_objects()}
    for used in ("similarity_plugins.networks.split.SplitNetwork", "similarity_plugins.apps.zoo.SmallCNN",
                 "similarity_plugins.datasets.folders.image_folder_data", "similarity_plugins.datasets.folders.cifar10_data",
                 "similarity_plugins.stitch.trainer.fit_stitch", "similarity_plugins.stitch.evaluate.evaluate_stitch"):
        assert used in paths, used
    for internal in ("ArrayStore", "to_rows", "check_labels", "check_progress", "tqdm_disable"):
        assert not [p for p in paths if p.rsplit(".", 1)[-1] == internal], internal
    stitch_page = (ROOT / "docs" / "reference" / "stitch.md").read_text(encoding="utf-8")
    assert not re.search(r"^::: similarity_plugins\.stitch\s*$", stitch_page, re.M)


def prose_arguments(obj) -> list[str]:
    """Arguments described in running text (``x``: ..., ``y``: ...) instead of an Args: section."""
    params = {p.name for p in getattr(obj, "parameters", [])} - {"self", "cls"}
    if not obj.docstring or not params:
        return []
    text = " ".join(s.value for s in obj.docstring.parse("google", warnings=False) if s.kind.value == "text")
    prose = sorted(p for p in params if re.search(rf"``{re.escape(p)}(?:\([^)]*\))?``: ", text))
    return [f"arguments {prose} described in running text: write an Args: section"] if len(prose) >= 2 else []


def test_reference_entries_document_arguments_in_tables():
    found = {obj.path: problems for obj in reference_objects() if obj.is_function or obj.is_class
             if (problems := prose_arguments(obj))}
    assert not found, found


def test_every_public_docstring_parses_as_google_style():
    found = {obj.path: problems for obj in public_objects() if (problems := docstring_problems(obj))}
    assert not found, "\n".join(f"{path}: {p}" for path, problems in found.items() for p in problems)


def signature_problems(obj) -> list[str]:
    """Parameters whose default is a name or a subscript the reader cannot see (not a value), or whose
    annotation is a quoted string."""
    bad = []
    for p in getattr(obj, "parameters", []):
        default = str(p.default) if p.default is not None else ""
        if re.search(r"\w\[['\"]", default) or re.fullmatch(r"_?[A-Z][A-Z0-9_]+", default):
            bad.append(f"{obj.path}({p.name}={default})")
        if isinstance(p.annotation, str) and p.annotation[:1] in "'\"":
            bad.append(f"{obj.path}({p.name}: {p.annotation})")
    return bad


def test_signatures_show_values_and_types():
    """Every public function and method of the Python API (the command line's own helpers aside: the CLI is
    documented by ``--help``) shows its defaults as values and its annotations as types."""
    bad = [problem for obj in public_objects() if obj.is_function and not obj.path.startswith("similarity_plugins.cli.")
           for problem in signature_problems(obj)]
    assert not bad, bad


def test_literal_defaults_are_their_constants():
    """Defaults written as values in a signature (so that the reference shows them) equal the constant that other
    code reads."""
    import inspect

    from similarity_plugins.apps.bench.measure import benchmark_metric
    from similarity_plugins.apps.bench.workloads import DEFAULT_WORKLOAD
    from similarity_plugins.cka.permutation import cka_permutation_test
    from similarity_plugins.measures.permutation import permutation_test
    from similarity_plugins.measures.regression import DEFAULT_ALPHA, linear_regression, ridge_front
    from similarity_plugins.stats.calibration import DEFAULT_ALPHA as LEVEL
    from similarity_plugins.stitch.bootstrap import DEFAULT_RESAMPLES, relative_accuracy_ci

    def default(function, name):
        return inspect.signature(function).parameters[name].default

    assert default(linear_regression, "alpha") == default(ridge_front, "alpha") == DEFAULT_ALPHA
    assert default(relative_accuracy_ci, "resamples") == DEFAULT_RESAMPLES
    assert default(benchmark_metric, "workload") == DEFAULT_WORKLOAD
    assert default(cka_permutation_test, "alpha") == default(permutation_test, "level") == LEVEL


def test_the_checks_find_what_they_look_for(tmp_path):
    source = tmp_path / "demo_doc.py"
    source.write_text('''from __future__ import annotations


def f(x, y, z):
    """Sum.

    Parameters
    ----------
    x: one. y: two.

    Args:
        x: one. y: two.
        y, z: three.

    Returns:
        The sum,
        of three.

    Raises:
        ValueError for bad input, TypeError otherwise.

    Example::

        f(1, 2, 3)
    """


def g(x: int, steps: int = RUN_DEFAULTS["steps"], lr: "float | None" = _LR) -> None:
    """Fine.

    Args:
        x: one.
        steps: two.
        lr: three.

    Returns:
        Nothing: the value is printed.
    """
''')
    module = griffe.load("demo_doc", search_paths=[str(tmp_path)], docstring_parser="google")
    problems = " | ".join(docstring_problems(module["f"]))
    for expected in ("underlined", "'::' marker", "also describes 'y'", "one argument per row",
                     "exception: description", "returns: 2 rows"):
        assert expected in problems, (expected, problems)
    assert not docstring_problems(module["g"])
    shown = " | ".join(signature_problems(module["g"]))
    assert "steps=RUN_DEFAULTS" in shown and "lr=_LR" in shown and "lr: 'float | None'" in shown, shown
    assert not signature_problems(module["f"])
