"""nic-affinity's advice in each resource manager's terms, every name checked first.

The advice is an environment for one rank (:func:`nccl_env`): ``NCCL_IB_HCA`` with the exact-
match prefix ``=`` and the NIC's active ports (``=mlx5_0:1,mlx5_1:1``; NCCL's environment
documentation: without ``=`` an entry is a prefix, so ``mlx5_1`` would also select
``mlx5_10`` to ``mlx5_19``), ``NCCL_NET_GDR_LEVEL`` at the near NIC's tier when that is a PCIe
switch (``PIX``/``PXB``: GPUDirect RDMA up to that NIC, no farther) and ``NCCL_CROSS_NIC=0``
for a job whose ranks are rail-aligned (each ring keeps to one rail). It is spelled

* for Slurm (:func:`slurm_forms`): the ``--export`` flag of ``srun``/``sbatch`` where the
  value has no comma (``--export`` splits its list at commas), the ``export`` lines for the
  batch script followed by ``--export=ALL``, and a TaskProlog snippet that prints the
  ``export`` lines for that job's tasks on that node;
* for Kubernetes (:func:`kube_plan`): a strategic merge patch of the owner's pod template
  that sets the container's env (merged by container and variable name) and, where the
  operator maps NICs to the RDMA device plugin's resources, requests the near NICs'
  resources instead of the far ones in use (their keys ``null``: a merge deletes them); a
  Deployment or StatefulSet is patched (a rollout), the template of a Job-like owner is
  immutable once created, so the plan then refuses and says what to put into the next
  submission.

A ``config`` recommendation is never applied: these plans are rendered (:func:`config_lines`,
the dry-run's script) for a person to review. Names from metrics (NICs, ports, nodes, Slurm
job ids, namespaces, pods, containers, owners, resource names) are checked against their
grammar before they go into a value or a command; a bad one raises :class:`AdviceError`.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence
from typing import Any

from toposcope.identity.names import is_node_name
from toposcope.rm.models import ActionKind, ActionRequest
from toposcope.rm.plan import HttpStep, Plan
from toposcope.rm.plan_script import comment, plan_lines

#: an RDMA device name as the kernel and NCCL spell it (``mlx5_0``, ``ibp12s0``, ``rocep1s0f0``)
NIC_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
_PORT = re.compile(r"[1-9][0-9]{0,2}")
_JOB_ID = re.compile(r"[0-9]{1,12}(?:_[0-9]{1,9})?")
_DNS_LABEL = re.compile(r"[a-z0-9](?:[-a-z0-9]{0,61}[a-z0-9])?")
_DNS_SUBDOMAIN = re.compile(
    r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?(?:\.[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)*"
)
#: an extended resource name: an optional DNS-subdomain prefix, then a qualified name part
_RESOURCE = re.compile(
    r"(?:[a-z0-9](?:[-a-z0-9]*[a-z0-9])?(?:\.[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
)
#: owners whose pod template can be patched in place (a rollout), by API path
PATCHABLE = {
    "Deployment": "/apis/apps/v1/namespaces/{ns}/deployments/{name}",
    "StatefulSet": "/apis/apps/v1/namespaces/{ns}/statefulsets/{name}",
}
STRATEGIC_MERGE = "application/strategic-merge-patch+json"
#: the tiers at which GPUDirect RDMA stays under a PCIe switch
SWITCH_TIERS = ("PIX", "PXB")


class AdviceError(ValueError):
    """A name from the metrics that cannot go into an environment value or a command."""


def check(pattern: re.Pattern[str], value: str, what: str, limit: int = 253) -> str:
    """``value`` when it matches ``pattern`` whole and is at most ``limit`` characters."""
    if len(value) > limit or not pattern.fullmatch(value):
        raise AdviceError(f"{what} {value[:80]!r} is not a valid {what}")
    return value


def hca_value(nics: Sequence[tuple[str, Sequence[str]]]) -> str:
    """``NCCL_IB_HCA``'s exact-match value for ``(nic, active ports)`` pairs: ``=nic:port,...``
    (every port of a NIC whose active ports are unknown: no ``:port``).
    """
    entries: list[str] = []
    for nic, ports in nics:
        check(NIC_NAME, nic, "NIC name", 64)
        checked = [check(_PORT, p, "port", 3) for p in ports]
        entries += [f"{nic}:{p}" for p in checked] if checked else [nic]
    if not entries:
        raise AdviceError("no NIC to name in NCCL_IB_HCA")
    return "=" + ",".join(entries)


def nccl_env(hca: str, near_tier: str, rail_aligned: bool) -> dict[str, str]:
    """The rank's NCCL environment: the HCA list, the GDR level at a switch tier, and no
    cross-NIC rings where the job is rail-aligned.
    """
    env = {"NCCL_IB_HCA": hca}
    if near_tier in SWITCH_TIERS:
        env["NCCL_NET_GDR_LEVEL"] = near_tier
    if rail_aligned:
        env["NCCL_CROSS_NIC"] = "0"
    return env


def slurm_forms(env: Mapping[str, str], job_id: str, node: str) -> dict[str, Any]:
    """The environment as Slurm takes it: an ``--export`` flag (when no value has a comma),
    batch-script lines, and a TaskProlog snippet for this job's tasks on ``node``.
    """
    check(_JOB_ID, job_id, "Slurm job id", 22)
    if not is_node_name(node):
        raise AdviceError(f"node name {node[:80]!r} is not a host name")
    pairs = [f"{name}={value}" for name, value in sorted(env.items())]
    exports = [f"export {name}={shlex.quote(value)}" for name, value in sorted(env.items())]
    prolog = [
        f'if [ "$SLURM_JOB_ID" = {job_id} ] && [ "$SLURMD_NODENAME" = {shlex.quote(node)} ]; then',
        *(f"  echo {shlex.quote(f'export {pair}')}" for pair in pairs),
        "fi",
    ]
    forms: dict[str, Any] = {
        "script_lines": [*exports, "srun --export=ALL ..."],
        "task_prolog": prolog,
    }
    if not any("," in value for value in env.values()):
        forms["export_flag"] = "--export=ALL," + ",".join(pairs)
    return forms


def resources_for(nics: Sequence[str], mapping: Mapping[str, str]) -> dict[str, str]:
    """The device plugin resources (NIC -> resource name, operator-given) of ``nics``, one
    each, as container limits; empty when a NIC has no resource named.
    """
    limits: dict[str, str] = {}
    for nic in nics:
        resource = mapping.get(nic)
        if resource is None:
            return {}
        limits[check(_RESOURCE, resource, "resource name", 317)] = "1"
    return limits


def parse_resource_map(items: Sequence[str]) -> dict[str, str]:
    """``("mlx5_0=rdma/hca_a", ...)`` -> ``{"mlx5_0": "rdma/hca_a"}``, every part checked."""
    mapping: dict[str, str] = {}
    for item in items:
        nic, sep, resource = item.partition("=")
        if not sep:
            raise AdviceError(f"{item[:80]!r} is not NIC=RESOURCE")
        check(NIC_NAME, nic.strip(), "NIC name", 64)
        mapping[nic.strip()] = check(_RESOURCE, resource.strip(), "resource name", 317)
    return mapping


def dropped_resources(
    far: Sequence[str], wanted: Mapping[str, str], mapping: Mapping[str, str]
) -> tuple[str, ...]:
    """The device plugin resources of the far NICs in use that the near ones replace."""
    return tuple(sorted({mapping[n] for n in far if n in mapping} - set(wanted)))


def template_patch(
    container: str,
    env: Mapping[str, str],
    limits: Mapping[str, str],
    dropped: Sequence[str] = (),
) -> dict[str, Any]:
    """A strategic merge patch of a pod template: ``container``'s env (merged by name) and,
    when given, its device plugin limits, the ``dropped`` resources removed (a ``null`` key
    deletes it in a merge).
    """
    check(_DNS_LABEL, container, "container name", 63)
    entry: dict[str, Any] = {
        "name": container,
        "env": [{"name": name, "value": value} for name, value in sorted(env.items())],
    }
    if limits:
        amounts: dict[str, str | None] = {
            **{check(_RESOURCE, r, "resource name", 317): None for r in dropped},
            **limits,
        }
        entry["resources"] = {"limits": dict(amounts), "requests": dict(amounts)}
    return {"spec": {"template": {"spec": {"containers": [entry]}}}}


def kube_plan(workload: str, node: str, kube: Mapping[str, Any]) -> Plan:
    """The Kubernetes plan of a ``proposed["kubernetes"]`` entry: the owner's template patch,
    or a refusal saying what to change where the owner cannot be patched in place.
    """
    request = ActionRequest(
        request_id="nic-affinity", kind=ActionKind.PIN, workload=workload, node=node
    )
    namespace = check(_DNS_LABEL, str(kube.get("namespace", "")), "namespace", 63)
    kind, name = str(kube.get("owner_kind", "")), str(kube.get("owner_name", ""))
    patch = kube["template_patch"]
    notes = (f"pod template patch for the next submission: {patch}",)
    if kind not in PATCHABLE:
        why = (
            f"the owner {kind or 'of the pod'} {name} cannot take a template patch in place "
            "(a Job's template is immutable; unknown owners are not guessed)"
        )
        return Plan(request, "kubernetes", notes=notes, refused=why)
    check(_DNS_SUBDOMAIN, name, "owner name")
    step = HttpStep(
        "PATCH",
        PATCHABLE[kind].format(ns=namespace, name=name),
        patch,
        api="kubernetes",
        content_type=STRATEGIC_MERGE,
        what=f"set the NCCL environment of {kind} {name}'s pods (a rollout restarts them)",
    )
    return Plan(request, "kubernetes", (step,))


def config_lines(proposed: Mapping[str, Any], backend: str) -> list[str]:
    """The dry-run lines of one nic-affinity recommendation for ``backend``: the Kubernetes
    plan, the Slurm forms, or the environment itself, as comments and commands.
    """
    workload, node = str(proposed["workload"]), str(proposed["node"])
    env = proposed["env"]
    lines = [comment(f"config (never applied): NCCL environment for {workload} on {node}")]
    kube = proposed.get("kubernetes")
    slurm = proposed.get("slurm")
    if backend == "kubernetes" and kube:
        plan = kube_plan(workload, node, kube)
        lines += plan_lines(plan)[1:]
    elif backend == "slurm" and slurm:
        if "export_flag" in slurm:
            lines.append(comment(f"srun or sbatch flag: {slurm['export_flag']}"))
        lines.append(comment("batch script lines:"))
        lines += [comment(line) for line in slurm["script_lines"]]
        lines.append(comment("TaskProlog lines (the next run of this job on this node):"))
        lines += [comment(line) for line in slurm["task_prolog"]]
    else:
        lines += [comment(f"{name}={value}") for name, value in sorted(env.items())]
    return lines


__all__ = [
    "NIC_NAME",
    "PATCHABLE",
    "STRATEGIC_MERGE",
    "AdviceError",
    "check",
    "config_lines",
    "dropped_resources",
    "hca_value",
    "kube_plan",
    "nccl_env",
    "parse_resource_map",
    "resources_for",
    "slurm_forms",
    "template_patch",
]
