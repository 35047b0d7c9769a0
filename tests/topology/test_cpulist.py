"""The cpulist and cpumask notations of sysfs and hwloc."""

from __future__ import annotations

import pytest

from toposcope.cpulist import bits_to_cpus, format_cpulist, parse_cpulist, parse_cpumask


@pytest.mark.parametrize(
    ("text", "cpus"),
    [
        ("", ()),
        ("\n", ()),
        ("0", (0,)),
        ("0-3", (0, 1, 2, 3)),
        ("0-3,8,10-11\n", (0, 1, 2, 3, 8, 10, 11)),
        ("8,0-1", (0, 1, 8)),  # unordered input, sorted output
        ("0-1,1-2", (0, 1, 2)),  # overlaps collapse
        ("48-63,176-191", (*range(48, 64), *range(176, 192))),
        ("5-5", (5,)),
        (" 2 , 4 ", (2, 4)),
        ("0-3,", (0, 1, 2, 3)),
    ],
)
def test_parse_cpulist(text: str, cpus: tuple[int, ...]) -> None:
    assert parse_cpulist(text) == cpus


@pytest.mark.parametrize("text", ["a", "1-", "-1", "3-1", "0-x", "1,,b", "0x3", "1.5"])
def test_parse_cpulist_rejects_garbage(text: str) -> None:
    with pytest.raises(ValueError, match=r"cpulist|CPU"):
        parse_cpulist(text)


@pytest.mark.parametrize(
    ("text", "cpus"),
    [
        ("", ()),
        ("0", ()),
        ("00000000,00000000", ()),
        ("1", (0,)),
        ("f", (0, 1, 2, 3)),
        ("0000ff00", tuple(range(8, 16))),
        # 32-bit words, most significant first: the second word is CPUs 0-31
        ("00000001,00000000", (32,)),
        ("1,00000000", (32,)),  # leading zeros of a word may be dropped
        ("80000000,00000001", (0, 63)),
        ("00000003,00000000,00000000", (64, 65)),
        ("ffffffff,ffffffff\n", tuple(range(64))),
        # hwloc writes 0x prefixes
        ("0x000000ff,0xf0000000", (*range(28, 32), *range(32, 40))),
        ("0x00000011,0x11111111", (0, 4, 8, 12, 16, 20, 24, 28, 32, 36)),
        ("0x0", ()),
    ],
)
def test_parse_cpumask(text: str, cpus: tuple[int, ...]) -> None:
    assert parse_cpumask(text) == cpus


@pytest.mark.parametrize("text", ["zz", "0x0g", "ff,xyz", "0-3"])
def test_parse_cpumask_rejects_garbage(text: str) -> None:
    with pytest.raises(ValueError, match="cpumask"):
        parse_cpumask(text)


def test_bits_to_cpus() -> None:
    assert bits_to_cpus(0) == ()
    assert bits_to_cpus(0b1010) == (1, 3)
    assert bits_to_cpus(1 << 200) == (200,)


@pytest.mark.parametrize(
    ("cpus", "text"),
    [
        ([], ""),
        ([3], "3"),
        ([0, 1, 2, 5], "0-2,5"),
        ((5, 0, 2, 1), "0-2,5"),
        ({7, 8, 10, 11, 12}, "7-8,10-12"),
        ([1, 1, 2], "1-2"),
        (range(48, 64), "48-63"),
    ],
)
def test_format_cpulist(cpus: list[int], text: str) -> None:
    assert format_cpulist(cpus) == text


@pytest.mark.parametrize("text", ["0-3,8,10-11", "0", "", "0-255", "1,3,5-7,100-103"])
def test_format_is_the_inverse_of_parse(text: str) -> None:
    assert format_cpulist(parse_cpulist(text)) == text


def test_mask_and_list_agree_on_a_sysfs_pair() -> None:
    # node0/cpumap and node0/cpulist of a 2-socket machine with SMT
    assert parse_cpumask("00000000,00ff00ff") == parse_cpulist("0-7,16-23")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0-1023:2/256", (0, 1, 256, 257, 512, 513, 768, 769)),
        ("0-7:1/4", (0, 4)),
        ("0-9:3/4", (0, 1, 2, 4, 5, 6, 8, 9)),
    ],
)
def test_parse_cpulist_group_notation(text: str, expected: tuple[int, ...]) -> None:
    assert parse_cpulist(text) == expected


@pytest.mark.parametrize("text", ["0-7:2", "0-7:5/4", "0-7:0/4", "0-7:a/4"])
def test_parse_cpulist_rejects_bad_groups(text: str) -> None:
    with pytest.raises(ValueError, match="group"):
        parse_cpulist(text)


def test_parse_cpumask_rejects_wide_words_and_ignores_nul() -> None:
    with pytest.raises(ValueError, match="wider than 32 bits"):
        parse_cpumask("1ffffffff,00000000")
    assert parse_cpumask("0000000f\x00\n") == (0, 1, 2, 3)
    assert parse_cpumask("ffffffffff") == tuple(range(40))
