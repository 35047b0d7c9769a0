"""Kubernetes label selectors (``app=web,tier!=db,env in (prod,staging),!canary``).

The grammar is Kubernetes' (``k8s.io/apimachinery/pkg/labels``): requirements separated by
commas, each ``key=value`` (or ``==``), ``key!=value``, ``key in (v1,v2)``,
``key notin (v1,v2)``, ``key`` (the label exists) or ``!key`` (it does not). ``!=`` and
``notin`` match objects without the label, as in Kubernetes. Keys are ``[prefix/]name`` and
values label values; anything else is a :class:`SelectorError` naming the requirement.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

_NAME = r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,61}[A-Za-z0-9])?"
_PREFIX = r"[a-z0-9](?:[a-z0-9.-]{0,251}[a-z0-9])?"
_KEY = rf"(?:{_PREFIX}/)?{_NAME}"
_KEY_RE = re.compile(_KEY)
_VALUE_RE = re.compile(rf"(?:{_NAME})?")
_SET_RE = re.compile(rf"({_KEY})\s+(in|notin)\s*\((.*)\)", re.DOTALL)
_EQUALITY_RE = re.compile(rf"({_KEY})\s*(==|=|!=)\s*(.*)", re.DOTALL)
#: the longest selector accepted, in characters
MAX_SELECTOR = 4096


class SelectorError(ValueError):
    """A malformed label selector; the message names the offending requirement."""


@dataclass(frozen=True)
class Requirement:
    """One requirement: ``operator`` is ``in``, ``notin``, ``exists`` or ``!exists``
    (``=`` and ``!=`` are ``in`` and ``notin`` of one value).
    """

    key: str
    operator: str
    values: frozenset[str] = frozenset()

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Whether ``labels`` meet this requirement."""
        present = self.key in labels
        if self.operator == "exists":
            return present
        if self.operator == "!exists":
            return not present
        inside = present and labels[self.key] in self.values
        return inside if self.operator == "in" else not inside


@dataclass(frozen=True)
class LabelSelector:
    """Requirements that must all hold (the empty selector matches everything)."""

    requirements: tuple[Requirement, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Whether ``labels`` meet every requirement."""
        return all(r.matches(labels) for r in self.requirements)


def _split(text: str) -> list[str]:
    """``text`` cut at the commas outside parentheses."""
    parts, depth, start = [], 0, 0
    for i, char in enumerate(text):
        if char == "(":
            depth += 1
            if depth > 1:
                raise SelectorError(f"nested parentheses in {text!r}")
        elif char == ")":
            depth -= 1
            if depth < 0:
                raise SelectorError(f"unbalanced ')' in {text!r}")
        elif char == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    if depth:
        raise SelectorError(f"unbalanced '(' in {text!r}")
    parts.append(text[start:])
    return parts


def _value(value: str, where: str) -> str:
    value = value.strip()
    if _VALUE_RE.fullmatch(value) is None:
        raise SelectorError(
            f"{value!r} in {where!r} is not a label value (up to 63 letters, digits, '-', "
            "'_' and '.', starting and ending with a letter or digit)"
        )
    return value


def _requirement(text: str) -> Requirement:
    part = text.strip()
    if not part:
        raise SelectorError("empty requirement (a stray comma?)")
    if part.startswith("!"):
        key = part[1:].strip()
        if _KEY_RE.fullmatch(key) is None:
            raise SelectorError(f"{part!r}: {key!r} is not a label key")
        return Requirement(key, "!exists")
    if match := _SET_RE.fullmatch(part):
        key, operator, inside = match.groups()
        values = frozenset(_value(v, part) for v in inside.split(","))
        return Requirement(key, operator, values)
    if match := _EQUALITY_RE.fullmatch(part):
        key, operator, value = match.groups()
        return Requirement(
            key, "notin" if operator == "!=" else "in", frozenset({_value(value, part)})
        )
    if _KEY_RE.fullmatch(part):
        return Requirement(part, "exists")
    raise SelectorError(
        f"{part!r} is not a requirement (key=value, key!=value, key in (a,b), "
        "key notin (a,b), key or !key)"
    )


def parse_selector(text: str) -> LabelSelector:
    """The selector ``text`` means; :class:`SelectorError` for a malformed one."""
    if len(text) > MAX_SELECTOR:
        raise SelectorError(f"label selector of {len(text)} characters (at most {MAX_SELECTOR})")
    if not text.strip():
        return LabelSelector()
    return LabelSelector(tuple(_requirement(p) for p in _split(text)))
