"""Slurm's GRES (generic resource) strings, GPUs above all.

One grammar covers what Slurm prints for nodes, jobs and requests, item by item (items are
separated by commas outside parentheses):

* a node's configured GRES: ``gpu:4(S:0-1)`` (4 GPUs on sockets 0 and 1), typed
  ``gpu:a100:4(S:0)``, several kinds ``gpu:a100:2(S:0),gpu:v100:2(S:1)``;
* what is in use on a node: ``gpu:(null):4(IDX:0-3)`` (indices 0 to 3 taken);
* a job's GPUs on one node (``gres_detail``, ``GRES=`` of ``scontrol show job -d``):
  ``gpu:2(IDX:2-3)``, ``gpu:a100:1(IDX:0)``;
* a request (``tres_per_node``, ``TresPerNode=``): ``gres:gpu:4``, ``gres:gpu:a100:2``, or
  ``gres/gpu:4`` as later Slurm versions write it.

Parsers are bounded (counts of at most :data:`MAX_COUNT`, index lists through
:func:`~toposcope.slurm.hostlist.parse_indices`) and refuse malformed items with a
:class:`~toposcope.slurm.errors.SlurmFormatError` that quotes the item.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from toposcope.slurm.errors import SlurmFormatError
from toposcope.slurm.hostlist import parse_indices, shown, split_outside

#: The largest count accepted (MPS shares and shards count in the millions at most).
MAX_COUNT = 10**12
#: The longest GRES text read, in characters.
MAX_GRES_TEXT = 64 * 1024
_EMPTY = frozenset({"", "(null)", "N/A", "None"})
_SUFFIXES = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4}
_COUNT_RE = re.compile(r"([0-9]{1,13})([KMGT]?)")
_NAME_RE = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,63}")
_TYPE_RE = re.compile(r"[A-Za-z0-9_.+-]{1,64}")
_ITEM_RE = re.compile(r"([^()]*)(?:\(([^()]*)\))?")


@dataclass(frozen=True)
class Gres:
    """One kind of generic resource: ``count`` of ``name`` (``gpu``), of ``type`` if typed.

    ``sockets`` are the sockets the devices hang off (a node's ``(S:0-1)``); ``indices`` the
    device indices taken (``(IDX:2-3)``); both empty when Slurm did not say.
    """

    name: str
    type: str | None
    count: int
    sockets: tuple[int, ...] = ()
    indices: tuple[int, ...] = ()


def split_items(text: str) -> list[str]:
    """``text`` split at the commas outside parentheses (``gpu:2(S:0,1),mps:100``)."""
    return [item.strip() for item in split_outside(text, "(", ")", "GRES") if item.strip()]


def _count(text: str, item: str) -> int:
    match = _COUNT_RE.fullmatch(text)
    if match is None:
        raise SlurmFormatError(f"GRES {shown(item)} has a malformed count {shown(text)}")
    value = int(match.group(1)) * _SUFFIXES[match.group(2)]
    if value > MAX_COUNT:
        raise SlurmFormatError(f"GRES {shown(item)} counts more than {MAX_COUNT:,}")
    return value


def _detail(text: str, item: str) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(sockets, indices) from the text inside a GRES item's parentheses."""
    key, colon, value = text.partition(":")
    if colon and key == "S":
        return parse_indices(value, f"socket list of GRES {shown(item)}"), ()
    if colon and key == "IDX":
        return (), parse_indices(value, f"index list of GRES {shown(item)}")
    return (), ()  # per-device shares of MPS or shards ("0/100,0/100"): not needed here


def parse_gres_item(item: str) -> Gres:
    """One GRES item: ``name[:type][:count][(S:...|IDX:...)]``; a missing count means 1.

    A type of ``(null)`` means untyped. Raises :class:`SlurmFormatError` quoting the item.
    """
    # Slurm prints an untyped GPU in use as "gpu:(null):4(IDX:0-3)"
    match = _ITEM_RE.fullmatch(item.strip().replace(":(null):", ":"))
    if match is None:
        raise SlurmFormatError(f"malformed GRES {shown(item)}")
    head, detail = match.group(1), match.group(2)
    fields = head.split(":")
    if len(fields) > 3:
        raise SlurmFormatError(f"GRES {shown(item)} has more than name, type and count")
    name = fields[0]
    if _NAME_RE.fullmatch(name) is None:
        raise SlurmFormatError(f"GRES {shown(item)} has a malformed name {shown(name)}")
    gres_type: str | None = None
    count = 1
    if len(fields) == 3:
        gres_type, count = fields[1], _count(fields[2], item)
    elif len(fields) == 2:
        if _COUNT_RE.fullmatch(fields[1]):
            count = _count(fields[1], item)
        else:
            gres_type = fields[1]
    if gres_type is not None and _TYPE_RE.fullmatch(gres_type) is None:
        raise SlurmFormatError(f"GRES {shown(item)} has a malformed type {shown(gres_type)}")
    sockets, indices = _detail(detail, item) if detail is not None else ((), ())
    return Gres(name=name, type=gres_type, count=count, sockets=sockets, indices=indices)


def parse_gres(text: str) -> tuple[Gres, ...]:
    """Every item of a GRES string (``(null)``, ``N/A`` and empty text give ``()``)."""
    text = text.strip()
    if text in _EMPTY:
        return ()
    if len(text) > MAX_GRES_TEXT:
        raise SlurmFormatError(f"GRES text of {len(text):,} characters is too long")
    return tuple(parse_gres_item(item) for item in split_items(text))


def parse_tres_gres(text: str) -> tuple[Gres, ...]:
    """The GRES of a TRES request string (``gres:gpu:4``, ``gres/gpu:a100:2``, ``cpu=2``...).

    Items that are no GRES (``cpu=2``, ``mem=4G``) are skipped.
    """
    text = text.strip()
    if text in _EMPTY:
        return ()
    if len(text) > MAX_GRES_TEXT:
        raise SlurmFormatError(f"TRES text of {len(text):,} characters is too long")
    found: list[Gres] = []
    for item in split_items(text):
        for prefix in ("gres:", "gres/"):
            if item.startswith(prefix):
                found.append(parse_gres_item(item[len(prefix) :].replace("=", ":")))
                break
    return tuple(found)


def gpus_of(gres: tuple[Gres, ...]) -> tuple[Gres, ...]:
    """The GPU items (name ``gpu``) of a parsed GRES string."""
    return tuple(g for g in gres if g.name == "gpu")


def gpu_count(gres: tuple[Gres, ...]) -> int:
    """How many GPUs a parsed GRES string names, all types together."""
    return sum(g.count for g in gpus_of(gres))


def gpu_indices(gres: tuple[Gres, ...]) -> tuple[int, ...]:
    """The GPU indices a parsed GRES string names (``gpu:2(IDX:2-3)`` gives ``(2, 3)``)."""
    return tuple(sorted({i for g in gpus_of(gres) for i in g.indices}))
