"""``toposcope kube claim-advice``: the ResourceClaimTemplate changes that align DRA pods.

    toposcope kube claim-advice --pod research/llm-train-7d9f8-x2k4q [--kubeconfig FILE]
    toposcope kube claim-advice --prometheus http://prometheus:9090 [--format json]

The pods are named (``--pod NAMESPACE/NAME``, repeatable) or found in Prometheus: every pod
with a DRA device off the NUMA node of its exclusive CPUs or cpuset
(``toposcope_kubelet_device_numa_aligned{source="dra"} == 0``) or a claim spanning PCIe roots
(``toposcope_kubelet_dra_claim_pcie_roots > 1``), the series the alerts of
``alerts/kubernetes.rules.yml`` watch. Each pod's claims are read from the API server and
advised (:mod:`toposcope.kubeapi.claim_advice`); the output is the plan of each change as a
shell script of ``kubectl`` calls (``--format script``, the default, as ``advise --dry-run``
renders plans) or the changes as JSON (``--format json``: the new template, the owner's
merge patch, the notes). Nothing is written to the cluster: review, then run the script.

For a pod not scheduled yet, whose claims are not allocated, the output is where each claim
fits best instead (:mod:`toposcope.kubeapi.claim_placement`): the node, the PCIe root or NUMA
node whose free devices hold every request, the node affinity to give the pod and the
constraint to give the claim; the scheduler then allocates within that group.

``--nri-policy topology-aware|balloons``: on nodes whose CPUs and memory an nri-plugins
resource policy pins, the pinning advice for the containers that use the claims is given in
that policy's pod annotations (:mod:`toposcope.kubeapi.nri_advice`), as a patch of the owner's
pod template, instead of agent calls.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from toposcope.errors import ConfigError
from toposcope.kubeapi.claim_placement import Placement
from toposcope.kubeapi.claim_plan import change_plan, nri_plan, proposed_state
from toposcope.kubeapi.claim_reader import PodAdvice, advise_pod
from toposcope.kubeapi.client import connect
from toposcope.kubeapi.nri_advice import NriPolicy
from toposcope.promql.client import PromApi, PromApiError
from toposcope.rm.plan_script import plan_lines

#: what finds the pods to advise (the alerts' conditions, any against, any driver)
MISALIGNED = (
    'count by (namespace, pod) (toposcope_kubelet_device_numa_aligned{source="dra"} == 0) '
    "or count by (namespace, pod) (toposcope_kubelet_dra_claim_pcie_roots > 1)"
)
#: pods advised at most in one run
MAX_PODS = 200


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare ``claim-advice``'s options."""
    parser.add_argument(
        "--pod",
        action="append",
        default=[],
        metavar="NAMESPACE/NAME",
        help="a pod to advise; repeatable",
    )
    parser.add_argument(
        "--prometheus",
        metavar="URL",
        help="find the misaligned DRA pods in this Prometheus (toposcope's kubelet series)",
    )
    parser.add_argument(
        "--kubeconfig",
        metavar="FILE",
        help="kubeconfig of the cluster (default: the pod's service account)",
    )
    parser.add_argument(
        "--nri-policy",
        choices=[p.value for p in NriPolicy],
        help="the nodes run this nri-plugins policy: give pinning as its pod annotations",
    )
    parser.add_argument(
        "--format",
        choices=("script", "json"),
        default="script",
        help="kubectl calls of each plan (default), or the changes as JSON",
    )


def pods_of(args: argparse.Namespace) -> list[tuple[str, str]]:
    """``(namespace, pod)`` from ``--pod`` and ``--prometheus``; a usage error without any."""
    pods: list[tuple[str, str]] = []
    for item in args.pod:
        namespace, _, name = str(item).partition("/")
        if not namespace or not name:
            raise ConfigError(f"--pod {item!r}: give NAMESPACE/NAME")
        pods.append((namespace, name))
    if args.prometheus:
        try:
            answer = PromApi(args.prometheus).get("query", {"query": MISALIGNED})
        except PromApiError as exc:
            raise ConfigError(f"--prometheus {args.prometheus}: {exc}") from None
        for item in answer.data.get("result") or []:
            labels = item.get("metric") or {} if isinstance(item, dict) else {}
            found = (str(labels.get("namespace") or ""), str(labels.get("pod") or ""))
            if all(found) and found not in pods:
                pods.append(found)
    if not pods:
        if args.prometheus:
            return []
        raise ConfigError("give --pod NAMESPACE/NAME or --prometheus URL")
    return pods[:MAX_PODS]


def placement_state(placement: Placement) -> dict[str, Any]:
    """A placement as data: node, group, devices, the pod's affinity, the claim constraint."""
    return {
        "node": placement.node,
        "attribute": placement.attribute,
        "value": placement.value,
        "devices": {k: list(v) for k, v in placement.devices.items()},
        "affinity": placement.pod_affinity(),
        "constraint": placement.constraint(),
    }


def render(advice: list[tuple[str, PodAdvice]], form: str) -> str:
    """The advice as a script of every plan, or as JSON."""
    if form == "json":
        document: list[dict[str, Any]] = [
            {
                "pod": pod,
                "changes": [{**proposed_state(c), "notes": list(c.notes)} for c in found.changes],
                "placements": {
                    claim: [placement_state(p) for p in ranked]
                    for claim, ranked in found.placements
                },
                "skipped": list(found.skipped),
                "nri": None
                if found.nri is None
                else {
                    "policy": found.nri.policy.value,
                    "annotations": found.nri.annotations,
                    "balloon_types": list(found.nri.balloon_types),
                    "notes": list(found.nri.notes),
                },
            }
            for pod, found in advice
        ]
        return json.dumps(document, indent=2, sort_keys=True) + "\n"
    lines = ["#!/bin/sh", "# toposcope kube claim-advice: review before running", "set -eu"]
    for pod, found in advice:
        lines.append(f"# pod {pod}")
        lines.extend(f"# skipped: {why}" for why in found.skipped)
        for change in found.changes:
            lines.extend(plan_lines(change_plan(change)))
        if found.nri is not None:
            namespace, _, name = pod.partition("/")
            lines.extend(plan_lines(nri_plan(found.nri, namespace, name, found.owner)))
        for claim, ranked in found.placements:
            for p in ranked:
                group = f"{p.attribute} {p.value}" if p.attribute else "the node as a whole"
                lines.append(
                    f"# pending, claim {claim}: node {p.node}, {group}: "
                    + "; ".join(f"{r} -> {', '.join(d)}" for r, d in sorted(p.devices.items()))
                )
    return "\n".join(lines) + "\n"


def run(args: argparse.Namespace) -> int:
    """Advise every pod asked for; print the plans (exit 2 on a configuration error)."""
    pods = pods_of(args)
    api = connect(args.kubeconfig)
    nri = NriPolicy(args.nri_policy) if args.nri_policy else None
    advice = [(f"{ns}/{name}", advise_pod(api, ns, name, nri)) for ns, name in pods]
    sys.stdout.write(render(advice, args.format))
    return 0


__all__ = ["MISALIGNED", "add_arguments", "placement_state", "pods_of", "render", "run"]
