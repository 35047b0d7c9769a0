"""Plans of the backends the advisor carries itself: the resource-manager API and systemd.

* :func:`api_plan`: the ``sim``, ``agent`` and ``dry-run`` backends send one ``POST
  {url}/actions`` with the action as its body; the HTTP clients
  (:mod:`toposcope.advisor.rmclients.http`) execute exactly this plan. A node agent serves
  one host, so for ``agent`` and ``dry-run`` (which stands for the agents) a ``place``,
  ``migrate`` or ``release`` is a refusal, as the agent itself would answer (400).
* :class:`SystemdPlanner`: a pin or memory move of a workload that is a systemd unit (its
  cgroup ends in ``NAME.service``, ``.scope`` or ``.slice``) becomes ``systemctl set-property
  UNIT AllowedCPUs=... AllowedMemoryNodes=...``; systemd writes the unit's cgroup (cgroup v2
  moves the pages to the new memory nodes). ``--resource-manager systemd`` only prints plans.
"""

from __future__ import annotations

import re
from collections.abc import Collection

from toposcope.advisor.rmclients.gang_plan import FABRIC_KINDS, GANG_POLICIES, gang_plan
from toposcope.advisor.rmclients.joint_plan import is_joint, joint_plan
from toposcope.cpulist import format_cpulist
from toposcope.identity.names import is_node_name
from toposcope.report.recommendation import Recommendation, RecommendationKind
from toposcope.rm import ActionKind, ActionRequest, to_json
from toposcope.rm.plan import (
    AGENT_KINDS,
    NOT_ON_ONE_HOST,
    CommandStep,
    HttpStep,
    Plan,
    PlanHints,
    refused,
)

#: why only the simulator moves a multi-node job whole
GANG = "only the simulator moves a multi-node job whole"
#: the simulator's resource-manager API at its default listen address
SIM_URL = "http://127.0.0.1:9850/api/v1"
#: a node agent's resource-manager API at its default port, ``{node}`` the node's name
AGENT_URL = "http://{node}:9848/api/v1"
#: a systemd unit name whose cgroup systemd manages (systemd.unit(5): at most 255 characters)
_UNIT_RE = re.compile(r"[A-Za-z0-9:_.\\@-]{1,248}\.(?:service|scope|slice)")


def api_base(url: str) -> str:
    """``url`` ending in ``/api/v1`` (appended when missing)."""
    base = url.rstrip("/")
    return base if base.endswith("/api/v1") else f"{base}/api/v1"


def api_plan(
    request: ActionRequest,
    url: str,
    backend: str,
    kinds: Collection[ActionKind] | None = None,
) -> Plan:
    """``POST {url}/actions`` with ``request``; a refusal for a kind outside ``kinds``.

    ``url`` may be a template with ``{node}`` (an agent per node): the request's node goes
    there when it is a host name (a refusal otherwise).
    """
    if kinds is not None and ActionKind(request.kind) not in kinds:
        return refused(request, backend, f"{request.kind}: {NOT_ON_ONE_HOST}")
    if "{node}" in url:
        node = request.node or ""
        if not is_node_name(node):
            return refused(request, backend, f"node {node[:80]!r} is not a host name")
        url = url.replace("{node}", node)
    step = HttpStep("POST", api_base(url) + "/actions", to_json(request))
    unknown = (
        ()
        if kinds is None
        else (
            "what the workload's owner allows (a Slurm job's CPUs, a pod's QoS class): "
            "the agent reads it when it applies",
        )
    )
    return Plan(request, backend, (step,), unknown=unknown)


class ApiPlanner:
    """Plans for the resource-manager API at ``url`` (``{node}``: one agent per node)."""

    def __init__(self, url: str, backend: str, kinds: Collection[ActionKind] | None) -> None:
        self.url = url
        self.backend = backend
        self.kinds = kinds

    def plan(self, request: ActionRequest, hints: PlanHints | None = None) -> Plan:
        """See :func:`api_plan`."""
        return api_plan(request, self.url, self.backend, self.kinds)

    @property
    def fabric_kinds(self) -> tuple[RecommendationKind, ...]:
        """The fabric-placement kinds planned whole: the simulator's gang moves only."""
        return FABRIC_KINDS if self.backend == "sim" else ()

    @property
    def gang_policies(self) -> tuple[str, ...]:
        """The policies whose gang moves are planned whole: both on the simulator."""
        return GANG_POLICIES if self.backend == "sim" else GANG_POLICIES[:1]

    def plan_fabric(self, recommendation: Recommendation) -> Plan:
        """The simulator's whole-gang move (:func:`.gang_plan.gang_plan`) or joint move
        (:func:`.joint_plan.joint_plan`); elsewhere a refusal.
        """
        if is_joint(recommendation):
            plan = joint_plan(recommendation, api_base(self.url))
        else:
            plan = gang_plan(recommendation, api_base(self.url))
        if self.backend != "sim":
            return refused(plan.request, self.backend, f"a node agent serves one host: {GANG}")
        return plan


def unit_of(request: ActionRequest, hints: PlanHints | None) -> str | None:
    """The systemd unit the workload is: its cgroup's last part, else its name; ``None``
    when neither is a unit name.
    """
    cgroup = (hints or PlanHints()).of(request).cgroup
    for candidate in (cgroup.rstrip("/").rpartition("/")[2], request.workload):
        if _UNIT_RE.fullmatch(candidate):
            return candidate
    return None


class SystemdPlanner:
    """Pins and memory moves of systemd units as ``systemctl set-property`` (module doc)."""

    backend = "systemd"

    def plan(self, request: ActionRequest, hints: PlanHints | None = None) -> Plan:
        """The ``systemctl set-property`` line, or a refusal saying why there is none."""
        kind = ActionKind(request.kind)
        if kind not in AGENT_KINDS:
            return refused(
                request, self.backend, f"{kind}: systemd runs units on one host; {NOT_ON_ONE_HOST}"
            )
        unit = unit_of(request, hints)
        if unit is None:
            return refused(
                request,
                self.backend,
                "the workload is not a systemd unit (its cgroup ends in no .service, .scope or "
                ".slice): pin it through the node agent (--resource-manager agent)",
            )
        settings = []
        if kind is ActionKind.PIN:
            settings.append(f"AllowedCPUs={format_cpulist(request.cpus)}")
        if request.mems:
            settings.append(f"AllowedMemoryNodes={format_cpulist(request.mems)}")
        step = CommandStep(("systemctl", "set-property", unit, *settings))
        notes = (
            f"run on {request.node or 'the node'}; systemctl set-property --runtime {unit} ... "
            "keeps the change until the next boot only",
        )
        unknown = (f"whether {unit} runs on {request.node}: systemd was not asked",)
        return Plan(request, self.backend, (step,), unknown=unknown, notes=notes)


__all__ = [
    "AGENT_URL",
    "SIM_URL",
    "ApiPlanner",
    "SystemdPlanner",
    "api_base",
    "api_plan",
    "unit_of",
]
