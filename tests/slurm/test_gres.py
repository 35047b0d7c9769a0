"""GRES strings of nodes, jobs and requests, as Slurm 22.05 prints them."""

from __future__ import annotations

import pytest

from toposcope.slurm.errors import SlurmFormatError
from toposcope.slurm.gres import Gres, gpu_count, gpu_indices, parse_gres, parse_tres_gres


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("gpu:4(S:0-1)", (Gres("gpu", None, 4, sockets=(0, 1)),)),
        ("gpu:a100:4(S:0)", (Gres("gpu", "a100", 4, sockets=(0,)),)),
        ("gpu:(null):4(IDX:0-3)", (Gres("gpu", None, 4, indices=(0, 1, 2, 3)),)),
        ("gpu:2(IDX:2-3)", (Gres("gpu", None, 2, indices=(2, 3)),)),
        ("gpu:a100:1(IDX:2)", (Gres("gpu", "a100", 1, indices=(2,)),)),
        ("gpu:0(IDX:N/A)", (Gres("gpu", None, 0),)),
        (
            "gpu:a100:2(S:0,1),gpu:v100:2(S:1)",
            (Gres("gpu", "a100", 2, sockets=(0, 1)), Gres("gpu", "v100", 2, sockets=(1,))),
        ),
        ("gpu:2,mps:200(0/100,0/100)", (Gres("gpu", None, 2), Gres("mps", None, 200))),
        ("shard:1K", (Gres("shard", None, 1024),)),
        ("gpu", (Gres("gpu", None, 1),)),
        ("(null)", ()),
        ("", ()),
    ],
)
def test_gres_strings(text: str, expected: tuple[Gres, ...]) -> None:
    assert parse_gres(text) == expected


def test_gpu_counts_and_indices_ignore_other_kinds() -> None:
    gres = parse_gres("gpu:a100:2(IDX:0-1),gpu:v100:1(IDX:3),mps:100")
    assert gpu_count(gres) == 3
    assert gpu_indices(gres) == (0, 1, 3)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("gres:gpu:4", (Gres("gpu", None, 4),)),
        ("gres:gpu:a100:2", (Gres("gpu", "a100", 2),)),
        ("gres/gpu:2", (Gres("gpu", None, 2),)),
        ("gres/gpu=2", (Gres("gpu", None, 2),)),
        ("cpu=2,mem=4000M,gres:gpu:1", (Gres("gpu", None, 1),)),
        ("", ()),
    ],
)
def test_requests(text: str, expected: tuple[Gres, ...]) -> None:
    assert parse_tres_gres(text) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("gpu:2(IDX:0-1", r"leaves a \( open"),
        ("gpu:2)", r"closes a \) it never opened"),
        ("gpu:a:b:c", "more than name, type and count"),
        ("9gpu:2", "malformed name"),
        ("gpu:a100:x", "malformed count"),
        ("gpu:a100:99999999999999", "malformed count"),
        ("gpu:(nul):1", "malformed GRES"),
        ("gpu:2(IDX:0-70000)", "index list"),
        ("gpu:2(IDX:0)junk", "malformed GRES"),
        ("gpu:a b:1", "malformed type"),
    ],
)
def test_bad_gres_is_refused_quoting_it(text: str, message: str) -> None:
    with pytest.raises(SlurmFormatError, match=message):
        parse_gres(text)
