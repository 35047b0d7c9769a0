"""The PromQL result types the advisor and the Dash app share: vectors, scalars, matrices,
NaN/Inf dropped and counted, anything else refused with a message naming the source."""

from __future__ import annotations

from typing import Any

import pytest

from toposcope.promql.client import PromApiBadAnswer
from toposcope.promql.results import (
    Matrix,
    Sample,
    Series,
    Vector,
    parse_matrix,
    parse_result,
    parse_vector,
)

SOURCE = "http://prom:9090"


def vector(*items: tuple[dict[str, Any], Any]) -> dict[str, Any]:
    """An instant query's ``data``: one sample per (labels, value)."""
    return {
        "resultType": "vector",
        "result": [{"metric": m, "value": [1700000000.5, v]} for m, v in items],
    }


def test_a_vector_keeps_labels_values_and_time_and_counts_what_is_not_finite() -> None:
    data = vector(({"__name__": "m", "gpu": "0"}, "0.5"), ({"gpu": "1"}, "NaN"), ({}, "-Inf"))
    got = parse_vector(data, source=SOURCE, warnings=("partial",))
    assert got.samples == (Sample({"__name__": "m", "gpu": "0"}, 0.5, 1700000000.5),)
    assert (got.non_finite, got.warnings) == (2, ("partial",))


def test_the_name_label_can_be_dropped() -> None:
    got = parse_vector(vector(({"__name__": "m", "gpu": "0"}, "1")), source=SOURCE, drop_name=True)
    assert dict(got.samples[0].labels) == {"gpu": "0"}


def test_a_scalar_is_one_label_less_sample() -> None:
    got = parse_vector({"resultType": "scalar", "result": [5, "4"]}, source=SOURCE)
    assert got.samples == (Sample({}, 4.0, 5.0),)
    nan = parse_vector({"resultType": "scalar", "result": [5, "NaN"]}, source=SOURCE)
    assert (nan.samples, nan.non_finite) == ((), 1)


def test_a_matrix_drops_non_finite_points_and_series_left_empty() -> None:
    data = {
        "resultType": "matrix",
        "result": [
            {"metric": {"gpu": "0"}, "values": [[1, "0.1"], [2, "NaN"], [3, "0.3"]]},
            {"metric": {"gpu": "1"}, "values": [[1, "+Inf"]]},
        ],
    }
    got = parse_matrix(data, source=SOURCE)
    assert got.series == (Series({"gpu": "0"}, ((1.0, 0.1), (3.0, 0.3))),)
    assert got.non_finite == 2


def test_parse_result_takes_whichever_type_was_answered() -> None:
    assert isinstance(parse_result(vector(({}, "1")), source=SOURCE), Vector)
    matrix = {"resultType": "matrix", "result": []}
    assert parse_result(matrix, source=SOURCE) == Matrix()
    with pytest.raises(PromApiBadAnswer, match=f"^{SOURCE} answered with result type 'string'$"):
        parse_result({"resultType": "string", "result": [1, "a"]}, source=SOURCE)


@pytest.mark.parametrize(
    ("parse", "data", "needle"),
    [
        (parse_vector, {"resultType": "matrix", "result": []}, "'matrix', not a vector"),
        (parse_matrix, {"resultType": "vector", "result": []}, "'vector', not a matrix"),
        (parse_vector, {"resultType": "vector", "result": {}}, "not a vector"),
        (parse_vector, {"resultType": "vector", "result": [{"value": [1, "1"]}]}, "no metric"),
        (parse_vector, vector(({"gpu": 0}, "1")), "labels that are not strings"),
        (parse_vector, vector(({}, "x")), "not a number"),
        (parse_vector, {"resultType": "vector", "result": [{"metric": {}, "value": [1]}]},
         r"not \[timestamp, value\]"),
        (parse_matrix, {"resultType": "matrix", "result": [{"metric": {}}]}, "has no values"),
    ],
)  # fmt: skip
def test_what_is_not_a_result_is_refused_naming_the_source(
    parse: Any, data: dict[str, Any], needle: str
) -> None:
    with pytest.raises(PromApiBadAnswer, match=needle) as raised:
        parse(data, source=SOURCE)
    assert str(raised.value).startswith(SOURCE)
