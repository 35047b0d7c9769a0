"""Reading a fake GPU's health signals from its description.

``row_remapping: {correctable, uncorrectable, pending, failed}``, ``retired_pages:
{single_bit, double_bit, pending}``, ``nvlink_errors: {replay, recovery, crc_flit, crc_data,
links: {N: {...}}}`` (``links`` overrides single links) and ``pcie_replays``; counts are
readings (constants, series or counters), leaving a signal out makes NVML answer
NOT_SUPPORTED for it.
"""

from __future__ import annotations

from typing import Any

from toposcope.fake_nvml.fields import Fields
from toposcope.fake_nvml.values import Value

#: the health fields of a GPU description
HEALTH_FIELDS = ("row_remapping", "retired_pages", "nvlink_errors", "pcie_replays")

_NVLINK_ERROR_TYPES = ("replay", "recovery", "crc_flit", "crc_data")


def _counts(fields: Fields, names: tuple[str, ...]) -> dict[str, Value]:
    """The readings ``names`` of a mapping, 0 where left out."""
    counts: dict[str, Value] = {}
    for name in names:
        value = fields.value(name)
        counts[name] = value if value is not None else 0.0
    return counts


def parse_health(fields: Fields) -> dict[str, Any]:
    """The :class:`~.spec.FakeGpu` health keyword arguments of one GPU's description."""
    health: dict[str, Any] = {}
    rows = fields.child("row_remapping", ("correctable", "uncorrectable", "pending", "failed"))
    if rows is not None:
        health["remapped_rows"] = _counts(rows, ("correctable", "uncorrectable"))
        health["row_remap_pending"] = rows.boolean("pending", False)
        health["row_remap_failed"] = rows.boolean("failed", False)
    pages = fields.child("retired_pages", ("single_bit", "double_bit", "pending"))
    if pages is not None:
        health["retired_pages"] = _counts(pages, ("single_bit", "double_bit"))
        health["retired_pages_pending"] = pages.boolean("pending", False)
    links = fields.child("nvlink_errors", (*_NVLINK_ERROR_TYPES, "links"))
    if links is not None:
        health["nvlink_errors"] = _counts(links, _NVLINK_ERROR_TYPES)
        by_link: dict[int, dict[str, Value]] = {}
        overrides = links.raw("links") or {}
        if not isinstance(overrides, dict):
            raise links.error(links.path_of("links"), "expected a mapping of link number")
        for key, raw in overrides.items():
            if isinstance(key, bool) or not isinstance(key, int) or key < 0:
                raise links.error(links.path_of("links"), f"link {key!r} is not a link number")
            sub = Fields(fields.source, links.path_of(f"links.{key}"), raw, _NVLINK_ERROR_TYPES)
            by_link[key] = {
                name: value
                for name in _NVLINK_ERROR_TYPES
                if (value := sub.value(name)) is not None
            }
        health["nvlink_errors_by_link"] = by_link
    replays = fields.value("pcie_replays")
    if replays is not None:
        health["pcie_replays"] = replays
    return health
