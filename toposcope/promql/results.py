"""What a PromQL query answers, typed: samples, series, vectors and matrices.

:mod:`toposcope.promql.client` carries requests to a PromQL API and checks the answer's envelope;
this module turns the envelope's ``data`` object into values, once for every reader (the
advisor's loader and the Dash app):

* an instant query answers a :class:`Vector` (a ``scalar`` becomes one label-less sample);
* a range query answers a :class:`Matrix`;
* :func:`parse_result` takes either, as the answer's ``resultType`` says.

Samples whose value is NaN or infinite (``0/0`` in PromQL, a stale series) are dropped and
counted in ``non_finite``, never handed on as numbers; a series left without points is
dropped too. Anything that is not the API's result shape (a missing ``metric``, a value that
is no number, another ``resultType``) raises :class:`PromApiBadAnswer` naming what is wrong.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from toposcope.promql.client import PromApiBadAnswer

#: the label holding the metric name; readers that identify series by their other labels
#: ask for it to be removed
NAME_LABEL = "__name__"


@dataclass(frozen=True)
class Sample:
    """One element of an instant vector: its labels, a finite value and, when known, the
    evaluation time (Unix seconds).
    """

    labels: Mapping[str, str]
    value: float
    timestamp: float | None = None


@dataclass(frozen=True)
class Series:
    """One element of a range answer: its labels and finite ``(timestamp, value)`` points."""

    labels: Mapping[str, str]
    points: tuple[tuple[float, float], ...]


@dataclass(frozen=True)
class Vector:
    """The answer of an instant query; ``non_finite`` counts the NaN/Inf samples dropped."""

    samples: tuple[Sample, ...] = ()
    non_finite: int = 0
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True)
class Matrix:
    """The answer of a range query; ``non_finite`` counts the NaN/Inf points dropped."""

    series: tuple[Series, ...] = ()
    non_finite: int = 0
    warnings: tuple[str, ...] = ()


def parse_vector(
    data: Mapping[str, Any],
    *,
    source: str,
    warnings: tuple[str, ...] = (),
    drop_name: bool = False,
) -> Vector:
    """The :class:`Vector` in an instant query's ``data`` (``vector`` or ``scalar``).

    ``source`` (the API's URL) starts every error message; ``drop_name`` removes
    ``__name__`` from the labels.
    """
    kind = data.get("resultType")
    result = data.get("result")
    if kind == "scalar":
        result = [{"metric": {}, "value": result}]
    elif kind != "vector" or not isinstance(result, list):
        raise PromApiBadAnswer(f"{source} answered an instant query with {kind!r}, not a vector")
    samples: list[Sample] = []
    dropped = 0
    for item in result:
        labels = _labels(item, source, drop_name)
        timestamp, value = _point(item.get("value"), source)
        if math.isfinite(value):
            samples.append(Sample(labels, value, timestamp))
        else:
            dropped += 1
    return Vector(tuple(samples), dropped, warnings)


def parse_matrix(
    data: Mapping[str, Any],
    *,
    source: str,
    warnings: tuple[str, ...] = (),
    drop_name: bool = False,
) -> Matrix:
    """The :class:`Matrix` in a range query's ``data`` (see :func:`parse_vector`)."""
    result = data.get("result")
    if data.get("resultType") != "matrix" or not isinstance(result, list):
        raise PromApiBadAnswer(
            f"{source} answered a range query with {data.get('resultType')!r}, not a matrix"
        )
    series: list[Series] = []
    dropped = 0
    for item in result:
        labels = _labels(item, source, drop_name)
        values = item.get("values")
        if not isinstance(values, list):
            raise PromApiBadAnswer(f"{source}: a matrix series has no values")
        points: list[tuple[float, float]] = []
        for pair in values:
            timestamp, value = _point(pair, source)
            if math.isfinite(value):
                points.append((timestamp, value))
            else:
                dropped += 1
        if points:
            series.append(Series(labels, tuple(points)))
    return Matrix(tuple(series), dropped, warnings)


def parse_result(
    data: Mapping[str, Any],
    *,
    source: str,
    warnings: tuple[str, ...] = (),
    drop_name: bool = False,
) -> Vector | Matrix:
    """The :class:`Matrix` or :class:`Vector` in ``data``, whichever its ``resultType`` is
    (``matrix``; ``vector`` or ``scalar``); another type raises :class:`PromApiBadAnswer`.
    """
    kind = data.get("resultType")
    if kind == "matrix":
        return parse_matrix(data, source=source, warnings=warnings, drop_name=drop_name)
    if kind in ("vector", "scalar"):
        return parse_vector(data, source=source, warnings=warnings, drop_name=drop_name)
    raise PromApiBadAnswer(f"{source} answered with result type {kind!r}")


def _labels(item: object, source: str, drop_name: bool) -> dict[str, str]:
    """The ``metric`` object of a result item (the decoded dict itself: no copy)."""
    metric = item.get("metric") if isinstance(item, dict) else None
    if not isinstance(metric, dict):
        raise PromApiBadAnswer(f"{source}: a result has no metric labels")
    try:
        "".join(metric.values())  # the cheapest check that every value is a string
    except TypeError:
        raise PromApiBadAnswer(f"{source}: a result has labels that are not strings") from None
    if drop_name:
        metric.pop(NAME_LABEL, None)
    return metric


def _point(pair: object, source: str) -> tuple[float, float]:
    """``(timestamp, value)`` of a ``[timestamp, "value"]`` pair."""
    if type(pair) is not list or len(pair) != 2:
        raise PromApiBadAnswer(f"{source}: a sample is not [timestamp, value]: {pair!r}")
    try:
        return float(pair[0]), float(pair[1])
    except (TypeError, ValueError):
        raise PromApiBadAnswer(f"{source}: a sample value is not a number: {pair!r}") from None
