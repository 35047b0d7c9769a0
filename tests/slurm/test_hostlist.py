"""Slurm host lists and index lists: expansion, order, bounds and clear refusals."""

from __future__ import annotations

import pytest

from toposcope.slurm.errors import SlurmFormatError
from toposcope.slurm.hostlist import MAX_HOSTS, expand_hostlist, parse_indices


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("n1", ("n1",)),
        ("n[1-3,5]", ("n1", "n2", "n3", "n5")),
        ("gpu[08-11]", ("gpu08", "gpu09", "gpu10", "gpu11")),
        ("r[1-2]n[1-2]", ("r1n1", "r1n2", "r2n1", "r2n2")),
        ("a,b[2-3],c", ("a", "b2", "b3", "c")),
        ("n[1-2],n2,n1", ("n1", "n2")),
        ("node-[1-2].example", ("node-1.example", "node-2.example")),
        ("", ()),
        ("(null)", ()),
        ("None", ()),
    ],
)
def test_host_lists_expand_in_order(text: str, expected: tuple[str, ...]) -> None:
    assert expand_hostlist(text) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("n[1-3", "leaves a [ open"),
        ("n1-3]", "closes a ] it never opened"),
        ("n[1-[2]]", "nests []"),
        ("n[3-1]", "ends before it starts"),
        ("n[a-b]", "malformed range"),
        ("n[1-2],,n3", "empty entry"),
        ("n[1-2] x", "no host name"),
        ("bad_name", "no host name"),
        (f"n[0-{MAX_HOSTS}]", f"more than {MAX_HOSTS:,} hosts"),
        ("r[0-999]n[0-999]", f"more than {MAX_HOSTS:,} hosts"),
        (",".join(["n[1-40000]"] * 3), f"more than {MAX_HOSTS:,} hosts"),
    ],
)
def test_bad_host_lists_are_refused_naming_the_problem(text: str, message: str) -> None:
    with pytest.raises(SlurmFormatError, match=message.replace("[", r"\[")):
        expand_hostlist(text)


def test_index_lists_reuse_the_cpulist_parser() -> None:
    assert parse_indices("0-3") == (0, 1, 2, 3)
    assert parse_indices("0,2-3") == (0, 2, 3)
    assert parse_indices("N/A") == ()
    with pytest.raises(SlurmFormatError, match="malformed CPU_IDs '0-x'"):
        parse_indices("0-x", "CPU_IDs")
    with pytest.raises(SlurmFormatError, match="above 65535"):
        parse_indices("0-70000", "IDX")
