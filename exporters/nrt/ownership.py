"""Who owns a node's NodeResourceTopology: toposcope writes only objects it owns.

Several projects publish these objects, one writer per node being the rule the scheduler
relies on. An existing object is toposcope's only when it carries the label
``app.kubernetes.io/managed-by: toposcope`` (set on every object toposcope creates) and no
other known writer has written it since. Known writers, recognised by the ``manager`` of
their ``metadata.managedFields`` entries (the API server records the client's field manager,
by default the program's name) or by their own ``managed-by`` label:

* resource-topology-exporter (k8stopologyawareschedwg, also in numaresources-operator);
* node-feature-discovery's topology updater (``nfd-topology-updater``) and master;
* nri-plugins' resource policies (``nri-resource-policy-*``).

The manager names are those the projects' binaries are called; a writer that sets another
field manager is still refused by the label rule, since only toposcope sets that label.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: the label toposcope sets on the objects it owns, and its value
MANAGED_BY = "app.kubernetes.io/managed-by"
OWNER = "toposcope"
#: the field manager toposcope's writes name (``?fieldManager=``)
FIELD_MANAGER = "toposcope-exporter"
#: prefixes of the field managers of other known writers (module docstring)
OTHER_WRITERS = (
    "resource-topology-exporter",
    "nfd-topology-updater",
    "nfd-master",
    "nri-resource-policy",
)


def _managers(meta: Mapping[str, Any]) -> list[str]:
    entries = meta.get("managedFields")
    if not isinstance(entries, list):
        return []
    return [
        str(entry.get("manager"))
        for entry in entries
        if isinstance(entry, Mapping) and isinstance(entry.get("manager"), str)
    ]


def other_writer(existing: Mapping[str, Any]) -> str | None:
    """Why ``existing`` belongs to another writer, or ``None`` when it is toposcope's."""
    meta = existing.get("metadata")
    if not isinstance(meta, Mapping):
        return "the object has no metadata"
    for manager in _managers(meta):
        if manager.startswith(OTHER_WRITERS):
            return f"written by {manager[:80]!r} (metadata.managedFields)"
    labels = meta.get("labels") if isinstance(meta.get("labels"), Mapping) else {}
    assert isinstance(labels, Mapping)
    owner = labels.get(MANAGED_BY)
    if owner != OWNER:
        shown = f"{MANAGED_BY}={str(owner)[:80]!r}" if owner is not None else f"no {MANAGED_BY}"
        return f"not created by toposcope ({shown} label)"
    return None
