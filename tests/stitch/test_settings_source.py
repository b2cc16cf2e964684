"""Stitch and IRI settings: one source for each default and choice, one meaning for the lr milestones.

`StitchSettings` (its field defaults) and `iri.service.IRI_DEFAULTS` (read from `iri.presets`) are where the
defaults are written; every other text that states a default or a list of choices (docstrings, user pages,
command help) is checked against them here, so a changed default cannot leave a stale text behind.
"""

from __future__ import annotations

import ast
import re
import warnings
from dataclasses import fields
from pathlib import Path
from typing import Any, get_args, get_type_hints

import pytest

from similarity_plugins.iri.service import IRI_DEFAULTS, IRI_DOCS
from similarity_plugins.stitch import settings as stitch_settings
from similarity_plugins.stitch.settings import (
    DM_LOSSES,
    INITS,
    OBJECTIVES,
    OPTION_DOCS,
    DmLoss,
    Init,
    StitchSettings,
    check_objective,
    stitch_options,
)

ROOT = Path(__file__).resolve().parents[2]
STITCH_DEFAULTS = {f.name: f.default for f in fields(StitchSettings) if f.name != "seed"}
CHOICES = {"init": INITS, "dm_loss": DM_LOSSES}
# every text that may state a stitch or IRI option's default (a missing one states none)
TEXTS = ["README.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md")),
         "similarity_plugins/plugins/stitching.py", "similarity_plugins/plugins/invariance.py",
         "similarity_plugins/stitch/settings.py", "similarity_plugins/iri/service.py"]
_UNPARSED = object()


def _value(text: str) -> Any:
    """The value a text states (``30``, ``1e-3``, ``(1/3, 2/3)``, ``"auto"``, ``None (all)``, ``all``), a set of
    choices for ``"a" | "b"``, or `_UNPARSED` for prose."""
    text = re.sub(r"\s*\((all|all 1)\)$", "", text.strip())
    if text == "all":
        return None
    if "|" in text:
        return {part.strip().strip('"') for part in text.split("|")}
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        pass
    if re.fullmatch(r"[A-Za-z][\w-]*", text):
        return text   # a bare word: `identity`
    if re.fullmatch(r"[\d./()\s,e+-]+", text):
        return eval(text, {"__builtins__": {}})  # arithmetic only (the pattern above): "(1/3, 2/3)"
    return _UNPARSED


def _bracketed(text: str, start: int) -> str:
    """The text after ``text[start] == "("`` up to its first top-level ``,`` or its closing ``)``."""
    depth, i = 0, start + 1
    while i < len(text):
        c = text[i]
        if c == "(":
            depth += 1
        elif c == ")":
            if depth == 0:
                break
            depth -= 1
        elif c == "," and depth == 0:
            break
        i += 1
    return text[start + 1:i]


def _stated_defaults() -> list[tuple[str, str, Any]]:
    """(where, option, stated value) for every ``name`` (VALUE), ``name``=VALUE, ``name``: ``VALUE`` (default
    and table row ``name``  VALUE  meaning of a known option in `TEXTS`."""
    names = "|".join(sorted({*STITCH_DEFAULTS, *IRI_DEFAULTS}, key=len, reverse=True))
    mention = re.compile(rf"`+({names})`+(?: \(|=(\w+)|: `([\w-]+)` \(default)")
    row = re.compile(rf"^`+({names})`+\s{{2,}}(\S.*?)(?:\s{{2,}}|$)", re.M)
    found = []
    for rel in TEXTS:
        path = ROOT / rel
        if not path.exists():
            continue
        text = path.read_text()
        for m in mention.finditer(text):
            stated = m.group(2) or m.group(3) or _bracketed(text, m.end() - 1)
            found.append((f"{rel}:{text.count(chr(10), 0, m.start()) + 1}", m.group(1), _value(stated)))
        for m in row.finditer(text):
            found.append((f"{rel}:{text.count(chr(10), 0, m.start()) + 1}", m.group(1), _value(m.group(2))))
    return [(where, name, value) for where, name, value in found if value is not _UNPARSED]


def _agrees(name: str, stated: Any) -> bool:
    default = STITCH_DEFAULTS[name] if name in STITCH_DEFAULTS else IRI_DEFAULTS[name]
    if isinstance(stated, set):
        return name in CHOICES and stated == set(CHOICES[name])
    if isinstance(default, tuple) and isinstance(stated, tuple):
        return stated == pytest.approx(default)
    return stated == default


def test_every_stated_default_is_the_source():
    stated = _stated_defaults()
    wrong = [(where, name, value) for where, name, value in stated if not _agrees(name, value)]
    assert wrong == []
    assert len(stated) >= 5, stated   # the stitching page alone states five; the scan must find them


def test_the_scan_finds_a_stale_default(tmp_path, monkeypatch):
    """The check above can fail: a text that states another default is reported."""
    page = tmp_path / "page.md"
    page.write_text("Options: `epochs` (31), `iri_tol` (1e-2), `init`: `identity` (default), `ls_samples`=2048.\n"
                    "``iri_steps``      999        per-sample step budget\n")
    monkeypatch.setattr(f"{__name__}.ROOT", tmp_path)
    monkeypatch.setattr(f"{__name__}.TEXTS", ["page.md"])
    stated = {(name, str(value)) for _, name, value in _stated_defaults()}
    assert stated == {("epochs", "31"), ("iri_tol", "0.01"), ("init", "identity"), ("ls_samples", "2048"),
                      ("iri_steps", "999")}
    wrong = {name for _, name, value in _stated_defaults() if not _agrees(name, value)}
    assert wrong == {"epochs", "init", "iri_steps"}


def test_command_help_states_the_source_defaults():
    from similarity_plugins.cli import build_parser

    checked = 0
    for sub in build_parser()._subparsers._group_actions[0].choices.values():
        for action in sub._actions:
            m = re.search(r"\(default ([^)]+)\)", action.help or "")
            if m and "stitch" in action.help and action.dest in STITCH_DEFAULTS:
                assert _value(m.group(1)) == STITCH_DEFAULTS[action.dest], (sub.prog, action.dest, action.help)
                checked += 1
    assert checked >= 1   # compare --epochs: "stitch training epochs (default 30)"


def test_declared_options_are_the_dataclass_and_the_docs():
    options = stitch_options()
    assert [o.name for o in options] == list(STITCH_DEFAULTS) == list(OPTION_DOCS)
    assert all(o.default == STITCH_DEFAULTS[o.name] and o.doc == OPTION_DOCS[o.name] for o in options)
    assert set(IRI_DOCS) == set(IRI_DEFAULTS)
    assert ", ".join(INITS[:-1]) in OPTION_DOCS["init"] and INITS[-1] in OPTION_DOCS["init"]


def test_choices_are_literal_types_checked_by_the_rule_table():
    hints = get_type_hints(StitchSettings)
    assert get_args(hints["init"]) == INITS == get_args(Init)
    assert get_args(hints["dm_loss"]) == DM_LOSSES == get_args(DmLoss)
    assert get_args(get_type_hints(check_objective)["return"]) == OBJECTIVES
    assert stitch_settings.RULES["init"].choices == INITS and stitch_settings.RULES["dm_loss"].choices == DM_LOSSES
    with pytest.raises(ValueError, match="did you mean 'identity'"):
        StitchSettings(init="identiy").validated()
    with pytest.raises(ValueError, match="unknown stitching objective 'mse'; choose one of hlm, slm, dm, fula"):
        check_objective("mse")
    assert check_objective("IRI-FuLA") == "fula"


def test_milestones_are_fractions_of_training():
    s = StitchSettings(epochs=4, milestones=(0.75, 0.25)).validated()
    assert s.milestones == (0.25, 0.75)
    assert [s.lr_at(step, 100) for step in (24, 25, 74, 75)] == pytest.approx([1e-3, 1e-4, 1e-4, 1e-5])


def test_milestone_epochs_are_epoch_numbers():
    with warnings.catch_warnings():
        warnings.simplefilter("error")   # the explicit form warns of nothing
        s = StitchSettings(epochs=4, milestone_epochs=(3, 1)).validated()
    assert s.milestones == (0.25, 0.75) and s.milestone_epochs is None
    assert s == StitchSettings(epochs=4, milestones=(0.25, 0.75)).validated()   # one fitted stitch, one memo key
    assert StitchSettings(epochs=4, milestone_epochs=2).validated().milestones == (0.5,)
    for bad in ((0,), (1.5,), ("2",)):
        with pytest.raises(ValueError, match=r"option milestone_epochs must be a list .*, each a positive epoch number"):
            StitchSettings(epochs=4, milestone_epochs=bad).validated()
    with pytest.raises(ValueError, match=r"option milestone_epochs must be an epoch number in \[1, 4\] \(at most "
                                         r"epochs=4\), got 5"):
        StitchSettings(epochs=4, milestone_epochs=(5,)).validated()
    with pytest.raises(ValueError, match="milestones .* or milestone_epochs .*, not both"):
        StitchSettings(epochs=4, milestones=(0.5,), milestone_epochs=(2,)).validated()


def test_milestones_as_epochs_still_work_with_a_deprecation_warning():
    with pytest.warns(DeprecationWarning, match=r"milestones=\[2.0, 3.0\].*milestone_epochs"):
        old = StitchSettings.from_options({"epochs": 4, "milestones": [2, 3]})
    assert old == StitchSettings.from_options({"epochs": 4, "milestone_epochs": [2, 3]})
    assert old.milestones == (0.5, 0.75)


def test_iri_choices_are_literal_types_on_generate_iris():
    from similarity_plugins.iri.backends import BACKENDS
    from similarity_plugins.iri.generate import generate_iris
    from similarity_plugins.iri.precision import PRECISIONS
    from similarity_plugins.iri.settings import AUTO, OPTIMIZERS
    from similarity_plugins.iri.settings import INITS as IRI_INITS
    from similarity_plugins.utils.progress import PROGRESS_MODES

    hints = get_type_hints(generate_iris)
    assert set(get_args(hints["optimizer"])) == {*OPTIMIZERS, AUTO}
    assert get_args(hints["init"]) == IRI_INITS
    assert get_args(hints["backend"]) == BACKENDS
    assert get_args(hints["precision"]) == PRECISIONS
    assert get_args(hints["progress"]) == PROGRESS_MODES
