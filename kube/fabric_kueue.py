"""A fabric placement as Kueue topology-aware scheduling asks for it: which annotation, at
which node label, and the JSON patches that set it.

Kueue (kubernetes-sigs/kueue, ``apis/kueue/v1beta2/topology_types.go``; docs "Topology Aware
Scheduling") reads two annotations on a PodSet's pod template:

* ``kueue.x-k8s.io/podset-required-topology: LABEL``: every pod of the PodSet in one domain
  of the level whose node label is ``LABEL`` (one rack, one block); the Workload waits until
  such a domain has room;
* ``kueue.x-k8s.io/podset-preferred-topology: LABEL``: the same as a preference, Kueue trying
  the next level up when no domain of that level fits, and spreading at the top.

The advisor's fabric placement (:mod:`toposcope.advisor.policies.fabric_advice`) names its
levels as the fabric does (``node``, ``leaf``, ``spine``, ``core``, ``level N``, ``block``,
``fabric``); a Kueue ``Topology`` lists its node labels highest first, the lowest switch
level (the leaf) last but for ``kubernetes.io/hostname`` (:mod:`toposcope.fabric.kubernetes`
reads the same order), so :func:`level_label` maps one onto the other. :func:`choose_request`
turns the advice into the annotation: a job held for a tighter cell *requires* that level
(Kueue's own wait), a job placed at the tightest level it can ever fit *requires* it, and a
job placed above it *prefers* the tightest level (Kueue climbs level by level as the advice
did). Kueue builds a Workload's ``spec.podSets[].topologyRequest`` from the annotations once,
when it creates the Workload, and does not rebuild it when only an annotation changes
(``pkg/util/equality/podset.go`` compares counts and containers), so a pending job's
Workload is patched too; its PodSets may change until quota is reserved
(``pkg/webhooks/workload_webhook.go``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from toposcope.fabric.cells import BLOCK_LEVEL, FABRIC_LEVEL, NODE_LEVEL
from toposcope.fabric.model import LEVEL_NAMES
from toposcope.kube.annotations import HOSTNAME_LABEL

#: the annotations of a PodSet's pod template Kueue's topology-aware scheduling reads
REQUIRED = "kueue.x-k8s.io/podset-required-topology"
PREFERRED = "kueue.x-k8s.io/podset-preferred-topology"
UNCONSTRAINED = "kueue.x-k8s.io/podset-unconstrained-topology"
#: the label naming a job's Kueue LocalQueue: a job carrying it is managed by Kueue
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
#: the Workload condition after which its PodSets can no longer change
QUOTA_RESERVED = "QuotaReserved"
#: the topologyRequest field of each annotation
_FIELD = {REQUIRED: "required", PREFERRED: "preferred", UNCONSTRAINED: "unconstrained"}
#: Kueue's bound on a topologyRequest's level (``MaxLength=63``)
MAX_REQUEST_LABEL = 63


@dataclass(frozen=True)
class TopologyRequest:
    """The annotation to set (``REQUIRED`` or ``PREFERRED``), its node label, and why."""

    annotation: str
    label: str
    why: str

    @property
    def field(self) -> str:
        """The Workload ``topologyRequest`` field the annotation becomes."""
        return _FIELD[self.annotation]


def level_label(level: str, levels: Sequence[str]) -> str | None:
    """The node label of the advice's ``level`` in a Topology's ``levels`` (highest first);
    ``None`` where the Topology has no such level (the whole fabric, a level too high).
    """
    switches = [label for label in levels if label != HOSTNAME_LABEL]
    if level == NODE_LEVEL:
        return HOSTNAME_LABEL if HOSTNAME_LABEL in levels else None
    if level == FABRIC_LEVEL:
        return None
    if level == BLOCK_LEVEL:
        depth = 0
    elif level in LEVEL_NAMES:
        depth = LEVEL_NAMES.index(level)
    elif level.startswith("level ") and level[6:].isdigit():
        depth = int(level[6:])
    else:
        return None
    return switches[-1 - depth] if depth < len(switches) else None


def choose_request(proposed: Mapping[str, Any], levels: Sequence[str]) -> TopologyRequest:
    """The Kueue annotation for a fabric-placement ``proposed`` (module docstring); a
    ``ValueError`` saying which level has no node label in ``levels``.
    """
    hold = proposed.get("hold_level")
    level, tightest = str(proposed.get("level", "")), str(proposed.get("tightest_level", ""))
    if hold:
        wanted, annotation = str(hold), REQUIRED
        why = f"held for one {hold}: Kueue admits it once a {hold} domain has room"
    elif level == tightest:
        wanted, annotation = level, REQUIRED
        why = f"the {level} is the tightest level it fits under: Kueue keeps every pod in one"
    else:
        wanted, annotation = tightest, PREFERRED
        why = (
            f"no {tightest} has room now: Kueue tries one {tightest} first, then climbs "
            f"level by level (the advice settled on the {level})"
        )
    label = level_label(wanted, levels)
    if label is None and wanted == FABRIC_LEVEL:
        top = [x for x in levels if x != HOSTNAME_LABEL][:1]
        if top:
            return TopologyRequest(PREFERRED, top[0], "the job spans the whole fabric")
    if label is None:
        shown = ", ".join(levels) or "none"
        raise ValueError(f"the Kueue Topology (levels {shown}) has no node label for the {wanted}")
    if len(label) > MAX_REQUEST_LABEL:
        raise ValueError(f"node label {label[:80]!r} is longer than Kueue's 63 characters")
    return TopologyRequest(annotation, label, why)


def pointer(*parts: str | int) -> str:
    """A JSON pointer (RFC 6901) of ``parts``, ``~`` and ``/`` escaped."""
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in parts)


def template_paths(kind: str, obj: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    """The JSON pointer and object of each PodSet's pod template of a job of ``kind``
    (``Job``, ``JobSet``, ``PyTorchJob``); none for another kind.
    """
    spec = obj.get("spec") or {}
    if kind == "Job":
        return [("/spec/template", spec.get("template") or {})]
    if kind == "JobSet":
        return [
            (pointer("spec", "replicatedJobs", i, "template", "spec", "template"), template)
            for i, job in enumerate(spec.get("replicatedJobs") or [])
            if isinstance(template := ((job.get("template") or {}).get("spec") or {}).get(
                "template"), Mapping)
        ]  # fmt: skip
    if kind == "PyTorchJob":
        return [
            (pointer("spec", "pytorchReplicaSpecs", name, "template"), template)
            for name, replica in sorted((spec.get("pytorchReplicaSpecs") or {}).items())
            if isinstance(replica, Mapping)
            and isinstance(template := replica.get("template"), Mapping)
        ]
    return []


def annotation_operations(
    path: str, template: Mapping[str, Any], request: TopologyRequest
) -> list[dict[str, Any]]:
    """JSON patch operations setting ``request``'s annotation on the pod template at
    ``path`` and removing the other topology annotations it carries.
    """
    metadata = template.get("metadata")
    if not isinstance(metadata, Mapping):
        return [
            {
                "op": "add",
                "path": f"{path}/metadata",
                "value": {"annotations": {request.annotation: request.label}},
            }
        ]
    annotations = metadata.get("annotations")
    if not isinstance(annotations, Mapping):
        value = {request.annotation: request.label}
        return [{"op": "add", "path": f"{path}/metadata/annotations", "value": value}]
    where = f"{path}/metadata/annotations"
    operations: list[dict[str, Any]] = [
        {"op": "remove", "path": where + pointer(other)}
        for other in (REQUIRED, PREFERRED, UNCONSTRAINED)
        if other != request.annotation and other in annotations
    ]
    operations.append(
        {"op": "add", "path": where + pointer(request.annotation), "value": request.label}
    )
    return operations


def merge_annotations(request: TopologyRequest) -> dict[str, str | None]:
    """The template annotations of ``request`` as a JSON merge patch: its annotation set,
    the other topology annotations removed (``null``).
    """
    others = (REQUIRED, PREFERRED, UNCONSTRAINED)
    return {a: (request.label if a == request.annotation else None) for a in others}


def workload_operations(
    workload: Mapping[str, Any], request: TopologyRequest
) -> list[dict[str, Any]]:
    """JSON patch operations giving every PodSet of a Kueue Workload ``request`` (its other
    topologyRequest fields, the pod index labels Kueue set, kept).
    """
    operations: list[dict[str, Any]] = []
    for index, podset in enumerate((workload.get("spec") or {}).get("podSets") or []):
        current = podset.get("topologyRequest") if isinstance(podset, Mapping) else None
        kept = {
            k: v
            for k, v in (current if isinstance(current, Mapping) else {}).items()
            if k not in _FIELD.values()
        }
        value = {**kept, request.field: request.label}
        path = pointer("spec", "podSets", index, "topologyRequest")
        operations.append({"op": "add", "path": path, "value": value})
    return operations


def quota_reserved(workload: Mapping[str, Any]) -> bool:
    """Whether Kueue reserved quota for the Workload (its PodSets are then immutable)."""
    conditions = (workload.get("status") or {}).get("conditions") or []
    return any(
        isinstance(c, Mapping) and c.get("type") == QUOTA_RESERVED and c.get("status") == "True"
        for c in conditions
    )


def to_nodes(affinity: Mapping[str, Any] | None, nodes: Sequence[str]) -> dict[str, Any]:
    """``affinity`` with every required node selector term narrowed to ``nodes`` (a gated
    pod may only have its required node affinity narrowed).
    """
    result: dict[str, Any] = {k: v for k, v in (affinity or {}).items()}
    node_affinity = dict(result.get("nodeAffinity") or {})
    required = dict(node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or {})
    expression = {"key": HOSTNAME_LABEL, "operator": "In", "values": sorted(nodes)}
    terms = required.get("nodeSelectorTerms") or [{}]
    required["nodeSelectorTerms"] = [
        {**term, "matchExpressions": [*(term.get("matchExpressions") or []), expression]}
        for term in terms
    ]
    node_affinity["requiredDuringSchedulingIgnoredDuringExecution"] = required
    result["nodeAffinity"] = node_affinity
    return result


__all__ = [
    "PREFERRED",
    "QUEUE_LABEL",
    "QUOTA_RESERVED",
    "REQUIRED",
    "UNCONSTRAINED",
    "TopologyRequest",
    "annotation_operations",
    "choose_request",
    "level_label",
    "merge_annotations",
    "pointer",
    "quota_reserved",
    "template_paths",
    "to_nodes",
    "workload_operations",
]
