"""The Kubernetes label-selector grammar of ``--workload-selector``."""

from __future__ import annotations

import pytest

from toposcope.advisor.label_selector import SelectorError, parse_selector

LABELS = {"app": "web", "tier": "frontend", "env": "prod", "example.com/team": "ml"}


@pytest.mark.parametrize(
    ("text", "matches"),
    [
        ("", True),
        ("app=web", True),
        ("app==web", True),
        ("app = web", True),
        ("app=db", False),
        ("app!=db", True),
        ("missing!=x", True),  # != matches objects without the label, as in Kubernetes
        ("app!=web", False),
        ("env in (prod,staging)", True),
        ("env in (dev, staging)", False),
        ("env notin (dev)", True),
        ("missing notin (dev)", True),
        ("env notin (prod)", False),
        ("app", True),
        ("missing", False),
        ("!missing", True),
        ("!app", False),
        ("example.com/team=ml", True),
        ("app=web,tier!=backend,env in (prod),!canary", True),
        ("app=web,tier=backend", False),
        ("empty=", False),
    ],
)
def test_matching(text: str, matches: bool) -> None:
    assert parse_selector(text).matches(LABELS) is matches


def test_empty_value_matches_an_empty_label() -> None:
    assert parse_selector("empty=").matches({"empty": ""})


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("app=web,", "empty requirement"),
        ("env in (prod", "unbalanced '('"),
        ("env in prod)", "unbalanced ')'"),
        ("env in ((a))", "nested parentheses"),
        ("app=we b", "is not a label value"),
        ("-app=web", "is not a requirement"),
        ("!-x", "is not a label key"),
        ("env in (a,-b)", "is not a label value"),
        ("a" * 5000, "at most 4096"),
    ],
)
def test_malformed_selectors_name_the_problem(text: str, message: str) -> None:
    with pytest.raises(SelectorError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_selector(text)
