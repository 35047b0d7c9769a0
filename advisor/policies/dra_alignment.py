"""dra-alignment: a pod's DRA devices away from its CPUs, or spread over PCIe roots.

Rule. For each pod and ResourceClaim (``toposcope_kubelet_dra_device_info``):

* a device that was on none of the NUMA nodes of its container's exclusive CPUs (or, for a
  container without exclusive CPUs, of its cpuset) during the whole window
  (``toposcope_kubelet_device_numa_aligned{source="dra"}``): the Topology Manager never aligns
  DRA devices, so only the claim can;
* or a claim whose devices of one driver span more than one PCIe root
  (``toposcope_kubelet_dra_claim_pcie_roots`` > 1).

The recommendation is in DRA's own terms: the ``spec.devices.constraints`` entry
``{matchAttribute: resource.kubernetes.io/pcieRoot}`` for the claim's template where every
device of the claim publishes a PCIe root (``pcie_root`` not empty), else ``.../numaNode``,
which a driver may publish; the scheduler then allocates the claim's devices together. A
template's spec is immutable, so applying it means a new template and the pod's owner pointed
at it: ``toposcope kube claim-advice --pod <namespace>/<pod>`` reads the claim, its template
and its owner from the API server and prints exactly that change (``proposed.apply_with``).
No resource-manager action: the scheduler places the new claims.

Gain model. ``misaligned share x remote_penalty`` (the claim's devices off their CPUs' nodes,
over its devices, times an assumed slowdown of host-device copies across the socket link) plus
``spread_penalty`` when the claim spans PCIe roots (an assumed slowdown of peer traffic through
the host bridge). Both are assumptions, not measurements.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from toposcope.advisor.dra_state import DraDevice
from toposcope.advisor.model import ClusterModel
from toposcope.advisor.policies.base import Evaluation, Policy, PolicySettings, setting
from toposcope.advisor.recommendations import make_recommendation
from toposcope.catalogue import spec
from toposcope.report.recommendation import (
    Evidence,
    Recommendation,
    RecommendationKind,
    Risk,
    Target,
)

PCIE_ROOT = "resource.kubernetes.io/pcieRoot"
NUMA_NODE = "resource.kubernetes.io/numaNode"
ALIGNED_METRIC = "toposcope_kubelet_device_numa_aligned"
ROOTS_METRIC = "toposcope_kubelet_dra_claim_pcie_roots"


@dataclass(frozen=True)
class DraAlignmentSettings(PolicySettings):
    """Settings of the dra-alignment policy."""

    remote_penalty: float = setting(
        0.1, gt=0, le=1, help="assumed slowdown of a job whose devices sit off its CPUs' node"
    )
    spread_penalty: float = setting(
        0.05, gt=0, le=1, help="assumed slowdown of a claim whose devices span PCIe roots"
    )


def misaligned(device: DraDevice) -> str:
    """The set a device is off (``exclusive_cpus`` first, then ``cpuset_cpus``), or ``""``."""
    for against in ("exclusive_cpus", "cpuset_cpus"):
        if against in device.aligned:
            return "" if device.aligned[against] else against
    return ""


class DraAlignment(Policy[DraAlignmentSettings]):
    """Recommend a ResourceClaim constraint for pods whose DRA devices are misaligned."""

    name = "dra-alignment"
    description = (
        "DRA devices off the NUMA node of their pod's CPUs, or a claim spread over PCIe roots: "
        "a matchAttribute constraint for the claim's template"
    )
    settings_type = DraAlignmentSettings
    requires = (spec("toposcope_kubelet_dra_device_info"),)

    def evaluate(self, model: ClusterModel) -> Evaluation:
        """One recommendation per misaligned or spread claim of a pod."""
        claims: dict[tuple[str, str, str, str, str], list[DraDevice]] = defaultdict(list)
        for device in model.dra_devices:
            claims[(*device.pod_key, device.claim_namespace, device.claim)].append(device)
        recs = [
            rec
            for _, devices in sorted(claims.items())
            if (rec := self._claim(devices, model.window)) is not None
        ]
        return Evaluation(tuple(recs), ())

    def _claim(self, devices: list[DraDevice], window: str) -> Recommendation | None:
        off = {d.device: against for d in devices if (against := misaligned(d))}
        spread = max(d.claim_pcie_roots for d in devices)
        if not off and spread <= 1:
            return None
        first = devices[0]
        attribute = PCIE_ROOT if all(d.pcie_root for d in devices) else NUMA_NODE
        constraint = {"matchAttribute": attribute}
        share = len(off) / len(devices)
        s = self.settings
        gain = share * s.remote_penalty + (s.spread_penalty if spread > 1 else 0.0)
        pod = f"{first.namespace}/{first.pod}"
        claim = f"{first.claim_namespace}/{first.claim}"
        why = []
        if off:
            names = ", ".join(
                f"{d} (off its {a.replace('_', ' ')})" for d, a in sorted(off.items())
            )
            why.append(f"its devices {names} sat off the NUMA nodes of its CPUs for {window}")
        if spread > 1:
            why.append(f"its devices span {spread} PCIe roots")
        evidence = [
            Evidence(
                ALIGNED_METRIC,
                {"node": d.node, "pod": d.pod, "device_id": d.device, "against": off[d.device]},
                0.0,
            )
            for d in devices
            if d.device in off
        ]
        if spread > 1:
            evidence.append(
                Evidence(ROOTS_METRIC, {"node": first.node, "dra_claim_name": first.claim}, spread)
            )
        return make_recommendation(
            kind=RecommendationKind.CONFIG,
            policy=self.name,
            target=Target(
                first.node, None, tuple(sorted({d.gpu for d in devices if d.gpu is not None}))
            ),
            summary=(
                f"pod {pod} on {first.node}: ResourceClaim {claim} "
                f"({'; '.join(why)}); add spec.devices.constraints "
                f"[{{matchAttribute: {attribute}}}] to its template, so that the scheduler "
                "allocates its devices together (toposcope kube claim-advice prints the change)"
            ),
            current={
                "devices": {
                    d.device: {"gpu": d.gpu, "numa_node": d.numa_node, "pcie_root": d.pcie_root}
                    for d in devices
                },
                "pcie_roots": spread,
            },
            proposed={
                "pod": pod,
                "claim": claim,
                "constraint": constraint,
                "resource_claim_spec_patch": {"devices": {"constraints": [constraint]}},
                "apply_with": f"toposcope kube claim-advice --pod {pod}",
            },
            evidence=evidence,
            estimated_gain=gain,
            gain_model=(
                f"misaligned share {share:.3f} x assumed remote penalty {s.remote_penalty:g}"
                + (f" + assumed spread penalty {s.spread_penalty:g}" if spread > 1 else "")
            ),
            confidence=0.6,
            risk=Risk.MEDIUM,
            claims=[f"dra-claim:{first.node}/{claim}"],
        )


__all__ = ["DraAlignment", "DraAlignmentSettings", "misaligned"]
