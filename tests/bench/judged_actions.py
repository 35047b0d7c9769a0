"""Judged actions as the closed loop's JSON lists them, for the tests of its figures."""

from __future__ import annotations

from typing import Any


def judged_action(kind: str, rnd: int, estimated: float, actual: float | None) -> dict[str, Any]:
    """One applied action of ``kind`` in round ``rnd``: its estimated and its true gain."""
    return {
        "kind": kind,
        "round": rnd,
        "estimated_gain": estimated,
        "estimated_gross_gain": estimated,
        "actual_gain": actual,
    }
