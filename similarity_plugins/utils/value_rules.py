"""Value rules as objects: each one checks a value and says in words what the value must be, from the same fields.

A rule is written once, where the value is owned (a metric's option, a stitch setting, an IRI tuning value), and
read everywhere: ``rule.check(name, value)`` returns the value converted (``3.0`` -> ``3`` for an integer, a word ->
a bool) or raises ``ValueError`` with the one message ``option NAME must be WORDS, got VALUE`` (plus a hint: a
close choice, an empty path); ``rule.words`` is the same words for tables and ``info``. The bounds that decide are
the bounds that are shown, so a check and its message cannot disagree (scikit-learn's ``Interval`` and
``StrOptions`` work this way).

The rules: `Interval` (a number between bounds), `OneOf` (one of a few values), `BOOLEAN` (a yes/no value), `TEXT`,
`PathRule`, `Array`, and the rules made of rules: `OrNone`, `AnyOf`, `Each` (a list) and `Keys` (a dict).

``rule.invalid()`` is a value the rule refuses: the contract test sends one to every option of every metric.
"""

from __future__ import annotations

import math
import numbers
import os
from dataclasses import dataclass, field
from typing import Any, Callable, Literal, Mapping

import numpy as np

from .rules import BOOLEAN_WORDS, bool_of
from .text import did_you_mean

#: What `ValueRule.read` returns for a value the rule refuses.
REFUSED = object()


class ValueRule:
    """What a value must be: `read` converts or refuses a value, `words` says what it must be.

    Subclasses implement `read`, `words` and `invalid`; `hint` may add what is wrong with a refused value.
    """

    def read(self, value: Any) -> Any:
        """``value`` converted to what the rule promises, or ``REFUSED``."""
        raise NotImplementedError

    @property
    def words(self) -> str:
        """What a value must be, in words (``"a positive integer"``, ``"one of sum, normalised"``)."""
        raise NotImplementedError

    def invalid(self) -> Any:
        """A value this rule refuses."""
        raise NotImplementedError

    def hint(self, value: Any) -> str:
        """Text appended to the message for the refused ``value`` (a close choice): ``""`` or ``"; ..."``."""
        return ""

    def message(self, name: str, value: Any) -> str:
        """The error for the refused ``value`` of the option ``name``."""
        return f"option {name} must be {self.words}, got {shown(value)}{self.hint(value)}"

    def check(self, name: str, value: Any) -> Any:
        """``value`` read by the rule (converted); ``ValueError`` with `message` when the rule refuses it."""
        read = self.read(value)
        if read is REFUSED:
            raise ValueError(self.message(name, value))
        return read


def shown(value: Any) -> str:
    """``value`` as an error message shows it: its repr, or the type and shape of an array."""
    if isinstance(value, np.ndarray) or hasattr(value, "detach"):
        return f"an array of shape {tuple(value.shape)} ({value.dtype})"
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _is_number(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_))


def _bound(x: float) -> str:
    return str(int(x)) if float(x).is_integer() and abs(x) < 1e15 else f"{x:g}"


@dataclass(frozen=True)
class Interval(ValueRule):
    """A finite number of ``kind`` (``int``: whole numbers, ``5.0`` read as ``5``; ``float``) within the bounds.

    Attributes:
        kind: ``int`` or ``float``; the value is returned as this type (booleans are no numbers).
        lo: the lower bound, or None.
        hi: the upper bound, or None.
        closed: which bounds belong to the interval: ``"both"``, ``"left"``, ``"right"`` or ``"neither"``.
        what: the noun of the words, without its article (``"growth factor"``); default ``"integer"`` or ``"number"``.
        note: words after the bounds (``"(0: one cosine over the budget)"``).
        finite: infinities are refused (NaN always is).
    """

    kind: type
    lo: float | None = None
    hi: float | None = None
    closed: Literal["both", "left", "right", "neither"] = "both"
    what: str = ""
    note: str = ""
    finite: bool = True

    def _inside(self, x: float) -> bool:
        left, right = self.closed in ("both", "left"), self.closed in ("both", "right")
        if self.lo is not None and (x < self.lo or (x == self.lo and not left)):
            return False
        return self.hi is None or x < self.hi or (x == self.hi and right)

    def read(self, value: Any) -> Any:
        if not _is_number(value) or math.isnan(float(value)) or (self.finite and math.isinf(float(value))):
            return REFUSED
        if self.kind is int and not float(value).is_integer():
            return REFUSED
        return self.kind(value) if self._inside(float(value)) else REFUSED

    @property
    def words(self) -> str:
        left, right = self.closed in ("both", "left"), self.closed in ("both", "right")
        noun = self.what or ("integer" if self.kind is int else "number")
        article = "an" if noun[0] in "aeiou" else "a"
        positive = (self.lo == 1 and left) if self.kind is int else (self.lo == 0 and not left)
        if positive and self.hi is None:
            text = f"a positive {noun}"
        elif self.lo is not None and self.hi is not None:
            text = f"{article} {noun} in {'[' if left else '('}{_bound(self.lo)}, {_bound(self.hi)}{']' if right else ')'}"
        elif self.lo is not None:
            text = f"{article} {noun} {'>=' if left else '>'} {_bound(self.lo)}"
        elif self.hi is not None:
            text = f"{article} {noun} {'<=' if right else '<'} {_bound(self.hi)}"
        else:
            text = f"{article} {noun}" if self.kind is int or self.what or not self.finite else "a finite number"
        return f"{text} {self.note}" if self.note else text

    def invalid(self) -> Any:
        if self.lo is not None:
            return self.kind(self.lo - 1 if self.closed in ("both", "left") else self.lo)
        if self.hi is not None:
            return self.kind(self.hi + 1 if self.closed in ("both", "right") else self.hi)
        return "not a number"


@dataclass(frozen=True)
class OneOf(ValueRule):
    """One of ``choices``; with ``aliases``, other spellings (``{"ls": "least-squares"}``, any case) read as theirs.

    Attributes:
        choices: the values it takes, in the order the words list them.
        note: words after the list (``"(auto: the preset for the front's structure)"``).
        aliases: ``{other spelling: choice}``; a text value is matched in lower case.
    """

    choices: tuple
    note: str = ""
    aliases: Mapping[Any, Any] = field(default_factory=dict)

    def read(self, value: Any) -> Any:
        key = value.lower() if self.aliases and isinstance(value, str) else value
        try:
            key = self.aliases.get(key, key)
            return key if key in self.choices else REFUSED
        except (TypeError, ValueError):  # unhashable, or an array compared element by element
            return REFUSED

    @property
    def words(self) -> str:
        listed = ", ".join(str(c) for c in self.choices)
        return f"one of {listed} {self.note}" if self.note else f"one of {listed}"

    def hint(self, value: Any) -> str:
        return did_you_mean(str(value), [str(c) for c in self.choices])

    def invalid(self) -> Any:
        return "?"


@dataclass(frozen=True)
class _Plain(ValueRule):
    """A plain kind of value: ``reader(value)`` is the value read, or ``REFUSED``; ``text`` its words."""

    reader: Callable[[Any], Any]
    text: str
    refused: Any

    def read(self, value: Any) -> Any:
        return self.reader(value)

    @property
    def words(self) -> str:
        return self.text

    def invalid(self) -> Any:
        return self.refused


#: A yes/no value (`rules.bool_of`): True/False, 1/0, or the words of `rules.TRUE_WORDS` and `rules.FALSE_WORDS`
#: (any case); read as a bool.
BOOLEAN = _Plain(lambda value: REFUSED if bool_of(value) is None else bool_of(value), BOOLEAN_WORDS, "maybe")
#: Any text (a ``str``).
TEXT = _Plain(lambda value: value if isinstance(value, str) else REFUSED, "text", 7)


@dataclass(frozen=True)
class OrNone(ValueRule):
    """None, or a value of ``rule``; ``meaning`` says what None means (``"all of them"``)."""

    rule: ValueRule
    meaning: str = ""

    def read(self, value: Any) -> Any:
        return None if value is None else self.rule.read(value)

    @property
    def words(self) -> str:
        return f"{self.rule.words}, or none" + (f" ({self.meaning})" if self.meaning else "")

    def hint(self, value: Any) -> str:
        return self.rule.hint(value)

    def invalid(self) -> Any:
        return self.rule.invalid()


@dataclass(frozen=True, init=False)
class AnyOf(ValueRule):
    """A value of the first of ``rules`` that accepts it."""

    rules: tuple[ValueRule, ...]

    def __init__(self, *rules: ValueRule) -> None:
        object.__setattr__(self, "rules", rules)

    def read(self, value: Any) -> Any:
        for rule in self.rules:
            read = rule.read(value)
            if read is not REFUSED:
                return read
        return REFUSED

    @property
    def words(self) -> str:
        return " or ".join(rule.words for rule in self.rules)

    def invalid(self) -> Any:
        for candidate in [rule.invalid() for rule in self.rules] + ["not a value"]:
            if self.read(candidate) is REFUSED:
                return candidate
        raise ValueError("every value is accepted")


@dataclass(frozen=True)
class Each(ValueRule):
    """A list (or tuple) whose items each obey ``rule``, returned as a tuple of the items read.

    Attributes:
        rule: the rule of each item.
        length: the number of items it must have, or None (any, at least one).
        single: one item alone is taken as a list of one.
    """

    rule: ValueRule
    length: int | None = None
    single: bool = False

    def read(self, value: Any) -> Any:
        if self.single and self.rule.read(value) is not REFUSED:
            value = (value,)
        if not isinstance(value, (list, tuple)) or not value or (self.length is not None and len(value) != self.length):
            return REFUSED
        items = tuple(self.rule.read(item) for item in value)
        return REFUSED if any(item is REFUSED for item in items) else items

    @property
    def words(self) -> str:
        count = f"a list of {self.length}" if self.length is not None else "a list"
        alone = " (one alone: a list of one)" if self.single else ""
        return f"{count}{alone}, each {self.rule.words}"

    def invalid(self) -> Any:
        return [self.rule.invalid()] * (self.length or 1)


@dataclass(frozen=True)
class Array(ValueRule):
    """An array of ``ndim`` dimensions with at least one element: a NumPy array, a tensor or nested lists.

    Attributes:
        ndim: its number of dimensions.
        what: the words (``"a (K, N) integer array of permutations"``).
        integers: its values must be integers.
    """

    ndim: int
    what: str
    integers: bool = False

    def read(self, value: Any) -> Any:
        if not isinstance(value, (np.ndarray, list, tuple)) and not hasattr(value, "detach"):
            return REFUSED
        try:
            array = np.asarray(value.detach().cpu() if hasattr(value, "detach") else value)
        except (TypeError, ValueError, RuntimeError):
            return REFUSED
        if array.ndim != self.ndim or array.size == 0 or (self.integers and array.dtype.kind not in "iu"):
            return REFUSED
        return value

    @property
    def words(self) -> str:
        return self.what

    def invalid(self) -> Any:
        return [[0.5]] if self.ndim == 2 else 7


@dataclass(frozen=True)
class PathRule(ValueRule):
    """A non-empty path (text or ``os.PathLike``), returned as given; with ``folder``, one that is not a file."""

    folder: bool = False

    def read(self, value: Any) -> Any:
        if not isinstance(value, (str, os.PathLike)):
            return REFUSED
        text = os.fspath(value)
        if not isinstance(text, str) or not text.strip():
            return REFUSED
        return REFUSED if self.folder and os.path.exists(text) and not os.path.isdir(text) else value

    @property
    def words(self) -> str:
        return "the path of a folder" if self.folder else "a path"

    def hint(self, value: Any) -> str:
        if isinstance(value, (str, os.PathLike)) and not str(os.fspath(value)).strip():
            return " (an empty path: an unset variable?)"
        if isinstance(value, (str, os.PathLike)):
            return f" ({os.fspath(value)!r} is a file)"
        return ""

    def invalid(self) -> Any:
        return ""


@dataclass(frozen=True)
class Keys(ValueRule):
    """A dict whose keys are among those of ``rules`` and whose values each obey the key's rule.

    Attributes:
        rules: ``{key: rule}``.
        what: the noun (``"tuning values"``).
    """

    rules: Mapping[str, ValueRule]
    what: str

    def read(self, value: Any) -> Any:
        if not isinstance(value, Mapping) or any(k not in self.rules for k in value):
            return REFUSED
        read = {k: self.rules[k].read(v) for k, v in value.items()}
        return REFUSED if any(v is REFUSED for v in read.values()) else read

    @property
    def words(self) -> str:
        return f"a dict of {self.what} (keys: {', '.join(self.rules)})"

    def hint(self, value: Any) -> str:
        if not isinstance(value, Mapping):
            return ""
        for key, item in value.items():
            if key not in self.rules:
                return f"; unknown key {key!r}{did_you_mean(str(key), self.rules)}"
            rule = self.rules[key]
            if rule.read(item) is REFUSED:
                return f"; {key} must be {rule.words}, got {shown(item)}{rule.hint(item)}"
        return ""

    def invalid(self) -> Any:
        return {"no such key": 0}


#: A whole number >= 1 (``5`` and ``5.0``; booleans are no numbers).
POSITIVE_INT = Interval(int, 1)
#: A finite number > 0.
POSITIVE = Interval(float, 0, closed="neither")
#: A finite number >= 0.
NON_NEGATIVE = Interval(float, 0)
#: How many samples to use: a whole number >= 1, or None for all of them.
SAMPLE_LIMIT = OrNone(Interval(int, 1, what="whole number of samples"), "all of them")


def check_rules(values: Mapping[str, Any], rules: Mapping[str, ValueRule]) -> dict[str, Any]:
    """``values`` with each one that has a rule read by it (`ValueRule.check`); the others as given."""
    return {name: rules[name].check(name, value) if name in rules else value for name, value in values.items()}
