"""The JSON form of a fabric (``toposcope fabric show --format json``).

Top-level ``switches`` (each ``name``, ``level``, ``level_name``, its child ``switches`` or
``nodes``, and ``uplink_gbps``, ``downlink_gbps``, ``oversubscription`` and ``link_speed``
where known), ``blocks`` (``name``, ``nodes``, ``block_sizes``), ``block_sizes`` and
``nodes`` (``name`` and ``ports``, each ``nic``, ``switch`` and ``gbps`` where known). The
same document is a valid ``--file`` input (:mod:`toposcope.fabric.yamlfile`): the derived
fields are read and ignored.
"""

from __future__ import annotations

from typing import Any

from toposcope.fabric.model import Fabric, Switch, level_name


def _switch(switch: Switch) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "name": switch.name,
        "level": switch.level,
        "level_name": level_name(switch.level),
    }
    if switch.switches:
        entry["switches"] = list(switch.switches)
    else:
        entry["nodes"] = list(switch.nodes)
    for key, value in (
        ("uplink_gbps", switch.uplink_gbps),
        ("downlink_gbps", switch.downlink_gbps),
        ("oversubscription", switch.oversubscription),
        ("link_speed", switch.link_speed),
    ):
        if value is not None:
            entry[key] = round(value, 3) if key == "oversubscription" else value
    return entry


def fabric_to_json(fabric: Fabric) -> dict[str, Any]:
    """The JSON-ready document of ``fabric`` (see the module docstring)."""
    sizes = list(fabric.block_sizes)
    return {
        "switches": [_switch(switch) for switch in fabric.switches],
        "blocks": [
            {"name": block.name, "nodes": list(block.nodes), "block_sizes": sizes}
            for block in fabric.blocks
        ],
        "block_sizes": sizes,
        "nodes": [
            {
                "name": node.name,
                "ports": [
                    {"nic": port.nic, "switch": port.switch}
                    | ({"gbps": port.gbps} if port.gbps is not None else {})
                    for port in node.ports
                ],
            }
            for node in fabric.nodes
        ],
    }
