"""Reading the recommendation JSON back, checked: the only way any part decodes a report.

The JSON comes from outside the reader (the advisor service's API, a saved ``toposcope
advise --format json`` file), so nothing is trusted: every object must have its required
fields and no unknown one, every field its JSON type, every enum one of its values, every
number be finite, the ``schema_version`` be :data:`~toposcope.report.recommendation.SCHEMA_VERSION`
and the actions fit the kind. The first problem found raises
:class:`~toposcope.report.recommendation.RecommendationError` naming where it is
(``recommendations[2].actions[0].kind``) and what is wrong, never a ``KeyError`` or
``TypeError``.

An API that serves a report with fields of its own around the contract (the advisor
service's ``service`` and each recommendation's ``first_seen``) names them in ``extra`` and
``recommendation_extra``: they are let through, unchecked, and not part of the result.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Collection
from dataclasses import MISSING, fields
from enum import StrEnum
from typing import Any, TypeVar

from toposcope.report.recommendation import (
    SCHEMA_VERSION,
    Evidence,
    Note,
    Recommendation,
    RecommendationError,
    RecommendationKind,
    Report,
    Risk,
    RunInfo,
    Severity,
    Target,
    check_actions,
)
from toposcope.rm import ActionRequest, InvalidAnswerError, parse_answer

_Enum = TypeVar("_Enum", bound=StrEnum)
_Item = TypeVar("_Item")

#: (required, optional) fields of a JSON object: a field of the dataclass without a default
#: is required, one with a default may be left out
_Keys = tuple[frozenset[str], frozenset[str]]


def _keys(cls: type[Any], *also: str) -> _Keys:
    """The JSON fields of dataclass ``cls`` (plus the required fields ``also``)."""
    every = fields(cls)
    required = {f.name for f in every if f.default is MISSING and f.default_factory is MISSING}
    return frozenset(required | set(also)), frozenset({f.name for f in every} - required)


_REPORT = _keys(Report, "schema_version")
_RUN = _keys(RunInfo)
_RECOMMENDATION = _keys(Recommendation)
_TARGET = _keys(Target)
_EVIDENCE = _keys(Evidence)
_ACTION = _keys(ActionRequest)
_NOTE = _keys(Note)


def report_from_json(text: str | bytes) -> Report:
    """Decode report JSON text (``NaN`` and ``Infinity`` are not JSON and are refused)."""
    try:
        data = json.loads(text, parse_constant=_no_constant)
    except (ValueError, RecursionError) as exc:
        raise RecommendationError(f"the report is not JSON: {exc}") from None
    return decode_report(data)


def decode_report(
    data: object, *, extra: Collection[str] = (), recommendation_extra: Collection[str] = ()
) -> Report:
    """A :class:`Report` from its decoded JSON (:meth:`Report.to_dict`'s form)."""
    obj = _object(data, "report", _REPORT, extra)
    version = obj["schema_version"]
    if version != SCHEMA_VERSION:
        raise RecommendationError(
            f"report: schema_version {version!r} is not supported (this version of toposcope "
            f"reads {SCHEMA_VERSION!r})"
        )
    return Report(
        run=_run(obj["run"], "run"),
        recommendations=_list(
            obj.get("recommendations", []),
            "recommendations",
            lambda item, where: decode_recommendation(
                item, extra=recommendation_extra, where=where
            ),
        ),
        notes=_list(obj.get("notes", []), "notes", _note),
    )


def decode_recommendation(
    data: object, *, extra: Collection[str] = (), where: str = "recommendation"
) -> Recommendation:
    """A :class:`Recommendation` from its decoded JSON (:meth:`Recommendation.to_dict`)."""
    obj = _object(data, where, _RECOMMENDATION, extra)
    kind = _enum(obj["kind"], f"{where}.kind", RecommendationKind)
    actions = _list(obj.get("actions", []), f"{where}.actions", decode_action)
    try:
        check_actions(kind, actions)
    except RecommendationError as exc:
        raise RecommendationError(f"{where}.actions: {exc}") from None
    return Recommendation(
        id=_str(obj["id"], f"{where}.id", empty=False),
        kind=kind,
        policy=_str(obj["policy"], f"{where}.policy"),
        target=_target(obj["target"], f"{where}.target"),
        summary=_str(obj["summary"], f"{where}.summary"),
        current=_object(obj["current"], f"{where}.current", None),
        proposed=_object(obj["proposed"], f"{where}.proposed", None),
        evidence=_list(obj["evidence"], f"{where}.evidence", _evidence),
        estimated_gain=_number(obj["estimated_gain"], f"{where}.estimated_gain", low=0.0),
        gain_model=_str(obj["gain_model"], f"{where}.gain_model"),
        confidence=_number(obj["confidence"], f"{where}.confidence", low=0.0, high=1.0),
        risk=_enum(obj["risk"], f"{where}.risk", Risk),
        severity=_enum(obj["severity"], f"{where}.severity", Severity),
        actions=actions,
        claims=_list(obj.get("claims", []), f"{where}.claims", _str),
    )


def decode_action(data: object, where: str = "action") -> ActionRequest:
    """An :class:`ActionRequest` from its JSON form, checked by the resource-manager contract's
    own rules (:func:`toposcope.rm.parse_answer`), so a report never holds an action that the
    resource-manager API would refuse.
    """
    try:
        return parse_answer(ActionRequest, data, where)
    except InvalidAnswerError as exc:
        raise RecommendationError(str(exc)) from None


def _run(data: object, where: str) -> RunInfo:
    obj = _object(data, where, _RUN)
    settings = _object(obj.get("settings", {}), f"{where}.settings", None)
    return RunInfo(
        started_at=_str(obj["started_at"], f"{where}.started_at"),
        source=_str(obj["source"], f"{where}.source"),
        window=_str(obj["window"], f"{where}.window"),
        policies=_list(obj["policies"], f"{where}.policies", _str),
        min_gain=_number(obj["min_gain"], f"{where}.min_gain"),
        duration_seconds=_number(
            obj.get("duration_seconds", 0.0), f"{where}.duration_seconds", low=0.0
        ),
        version=_str(obj.get("version", ""), f"{where}.version"),
        settings={
            name: _object(value, f"{where}.settings.{name}", None)
            for name, value in settings.items()
        },
    )


def _target(data: object, where: str) -> Target:
    obj = _object(data, where, _TARGET)
    workload = obj.get("workload")
    return Target(
        node=_str(obj["node"], f"{where}.node", empty=False),
        workload=None if workload is None else _str(workload, f"{where}.workload"),
        gpus=_list(obj.get("gpus", []), f"{where}.gpus", _int),
    )


def _evidence(data: object, where: str) -> Evidence:
    obj = _object(data, where, _EVIDENCE)
    labels = _object(obj["labels"], f"{where}.labels", None)
    return Evidence(
        series=_str(obj["series"], f"{where}.series", empty=False),
        labels={k: _str(v, f"{where}.labels.{k}") for k, v in labels.items()},
        value=_number(obj["value"], f"{where}.value"),
    )


def _note(data: object, where: str) -> Note:
    obj = _object(data, where, _NOTE)
    return Note(*(_str(obj[k], f"{where}.{k}") for k in ("policy", "target", "reason")))


# JSON types ---------------------------------------------------------------------------------
def _object(
    data: object,
    where: str,
    keys: _Keys | None,
    extra: Collection[str] = (),
) -> dict[str, Any]:
    """``data`` as an object; with ``keys`` (required, optional) also its fields checked."""
    if not isinstance(data, dict):
        raise RecommendationError(f"{where}: expected an object, got {_shown(data)}")
    if keys is not None:
        required, optional = keys
        missing = sorted(required - data.keys())
        if missing:
            raise RecommendationError(f"{where}: missing {', '.join(missing)}")
        unknown = sorted(data.keys() - required - optional - set(extra))
        if unknown:
            raise RecommendationError(f"{where}: unknown field(s) {', '.join(unknown)}")
    return data


def _list(data: object, where: str, item: Callable[[object, str], _Item]) -> tuple[_Item, ...]:
    if not isinstance(data, list):
        raise RecommendationError(f"{where}: expected a list, got {_shown(data)}")
    return tuple(item(value, f"{where}[{i}]") for i, value in enumerate(data))


def _str(data: object, where: str, empty: bool = True) -> str:
    if not isinstance(data, str):
        raise RecommendationError(f"{where}: expected a string, got {_shown(data)}")
    if not empty and not data:
        raise RecommendationError(f"{where}: must not be empty")
    return data


def _int(data: object, where: str) -> int:
    if not isinstance(data, int) or isinstance(data, bool) or data < 0:
        raise RecommendationError(f"{where}: expected a whole number >= 0, got {_shown(data)}")
    return data


def _number(data: object, where: str, low: float | None = None, high: float | None = None) -> float:
    if not isinstance(data, int | float) or isinstance(data, bool) or not math.isfinite(data):
        raise RecommendationError(f"{where}: expected a finite number, got {_shown(data)}")
    if (low is not None and data < low) or (high is not None and data > high):
        bounds = f"{low if low is not None else '-inf'} to {high if high is not None else 'inf'}"
        raise RecommendationError(f"{where}: {data!r} is outside {bounds}")
    return float(data)


def _enum(data: object, where: str, enum: type[_Enum]) -> _Enum:
    text = _str(data, where)
    try:
        return enum(text)
    except ValueError:
        known = ", ".join(e.value for e in enum)
        raise RecommendationError(f"{where}: {data!r} is not one of {known}") from None


def _shown(data: object) -> str:
    """A short description of an unexpected value, for messages."""
    if isinstance(data, dict):
        return "an object"
    if isinstance(data, list):
        return "a list"
    text = json.dumps(data)
    return text if len(text) <= 40 else f"{text[:37]}..."


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")
