"""A PCI function's PCIe link from sysfs: speed and width, the most it can do and now.

The kernel writes them under ``/sys/bus/pci/devices/<bus id>/``: ``max_link_speed`` and
``current_link_speed`` as ``"16.0 GT/s PCIe"`` (older kernels ``"16 GT/s"``, ``"Unknown"``
when the link does not say), ``max_link_width`` and ``current_link_width`` as lane counts.
A GPU's link drops to a lower speed while it idles (power saving), so the current speed
alone says little; a current width below the maximum under load is a link that trained
down (a bad riser or slot), which is what the advisor's link prices read.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from toposcope.topology.sysfs_files import read_text

#: ``"16.0 GT/s PCIe"``, ``"8 GT/s"``, ``"2.5 GT/s"``
_SPEED = re.compile(r"(\d{1,3}(?:\.\d{1,2})?) GT/s(?: PCIe)?")
#: a PCI bus id as sysfs names a function's directory
_BUS_ID = re.compile(r"[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]")
#: the widest link a PCIe device has (x32 is in the specification, rarely built)
MAX_LANES = 32


@dataclass(frozen=True)
class PcieLinkState:
    """Speeds in GT/s and widths in lanes (``None`` where sysfs does not say)."""

    max_gts: float | None
    max_lanes: int | None
    current_gts: float | None
    current_lanes: int | None

    def known(self) -> bool:
        """Whether sysfs said anything about the link."""
        values = (self.max_gts, self.max_lanes, self.current_gts, self.current_lanes)
        return any(v is not None for v in values)


def parse_speed(text: str | None) -> float | None:
    """GT/s of a sysfs link speed (``None`` for ``Unknown``, empty or garbage)."""
    found = _SPEED.fullmatch((text or "").strip())
    return float(found.group(1)) if found else None


def parse_width(text: str | None) -> int | None:
    """Lanes of a sysfs link width (``None`` for 0, ``Unknown``, garbage or over 32)."""
    value = (text or "").strip()
    if not re.fullmatch(r"\d{1,2}", value) or not 0 < int(value) <= MAX_LANES:
        return None
    return int(value)


def read_pcie_link(sysfs: Path, bus_id: str) -> PcieLinkState:
    """The link of the PCI function ``bus_id`` (``0000:07:00.0``) under ``sysfs``; nothing
    known for a bus id of another form (never a path outside ``bus/pci/devices``).
    """
    if not _BUS_ID.fullmatch(bus_id):
        return PcieLinkState(None, None, None, None)
    entry = sysfs / "bus" / "pci" / "devices" / bus_id
    return PcieLinkState(
        parse_speed(read_text(entry / "max_link_speed")),
        parse_width(read_text(entry / "max_link_width")),
        parse_speed(read_text(entry / "current_link_speed")),
        parse_width(read_text(entry / "current_link_width")),
    )
