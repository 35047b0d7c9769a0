"""Ready-to-apply commands for a report, one renderer per resource manager.

``toposcope advise --dry-run`` prints what applying would run, in the form the chosen
resource manager takes: ``scontrol`` lines for Slurm, the resource-manager API call
(``curl``, the token left as ``$TOKEN``) for the simulator and the node agents, and
``kubectl`` calls for Kubernetes where the action has a Kubernetes form. An action a backend
cannot carry out becomes a ``#`` comment saying why, so the output stays a valid shell
script. Names come from metric labels anyone can write: they are checked against the core's
naming rules and every word is shell-quoted; comments show control characters as escapes.

:data:`RENDERERS` is the explicit table of backends and their renderers: a new backend adds
one function and one entry there.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

from toposcope.advisor.formatters.escaping import visible
from toposcope.advisor.rmclients.http import api_base
from toposcope.identity.names import is_node_name
from toposcope.report.recommendation import Report, action_to_dict
from toposcope.rm import ActionKind, ActionRequest

#: the simulator's resource-manager API at its default listen address
SIM_URL = "http://127.0.0.1:9850/api/v1"
#: a node agent's resource-manager API at its default port, ``{node}`` the node's name
AGENT_URL = "http://{node}:9848/api/v1"
#: the API a backend's calls go to when no ``--rm-url`` is given
DEFAULT_URLS: Mapping[str, str] = {"sim": SIM_URL, "agent": AGENT_URL, "dry-run": AGENT_URL}
#: a Slurm job's workload name (``slurm-job-42``) or its bare job id
_SLURM_JOB_RE = re.compile(r"(?:slurm-job-)?([1-9][0-9]{0,9})")


@dataclass(frozen=True)
class CommandContext:
    """What a renderer may need beyond the action: the resource manager's ``--rm-url`` (a
    template with ``{node}`` for agents) and each workload's pod as ``node/workload`` ->
    ``(namespace, pod)``, for the backends that address workloads by pod.
    """

    rm_url: str | None = None
    pods: Mapping[str, tuple[str, str]] = field(default_factory=dict)


Renderer = Callable[[ActionRequest, str, CommandContext], list[str]]


def _comment(text: str) -> str:
    return "# " + " ".join(visible(text).split())


def _cannot(backend: str, action: ActionRequest, why: str) -> list[str]:
    return [_comment(f"{backend} cannot {action.kind} {action.workload}: {why}")]


def http_call(action: ActionRequest, node: str, context: CommandContext) -> list[str]:
    """``POST {url}/actions`` with the action as its body, the token as ``$TOKEN``."""
    template = context.rm_url or AGENT_URL
    if "{node}" in template:
        if not is_node_name(node):
            return _cannot("the agent", action, f"node {node[:80]!r} is not a host name")
        template = template.replace("{node}", node)
    body = json.dumps(action_to_dict(action), sort_keys=True, separators=(",", ":"))
    return [
        'curl -fsS -X POST -H "Authorization: Bearer $TOKEN" '
        f"-H 'Content-Type: application/json' --data {shlex.quote(body)} "
        f"{shlex.quote(api_base(template) + '/actions')}"
    ]


def _slurm_job(action: ActionRequest) -> str | None:
    match = _SLURM_JOB_RE.fullmatch(action.workload)
    return match.group(1) if match else None


def slurm_commands(action: ActionRequest, node: str, context: CommandContext) -> list[str]:
    """``scontrol`` lines: steer a pending job, or requeue, steer and release a running one."""
    job = _slurm_job(action)
    if job is None:
        return _cannot("Slurm", action, "the workload is not a Slurm job (slurm-job-<id>)")
    target = action.node or node
    if action.kind in (ActionKind.PLACE, ActionKind.MIGRATE) and not is_node_name(target):
        return _cannot("Slurm", action, f"node {target[:80]!r} is not a host name")
    if action.kind == ActionKind.PLACE:
        return [f"scontrol update JobId={job} ReqNodeList={target}"]
    if action.kind == ActionKind.MIGRATE:
        return [
            f"scontrol requeuehold {job}",
            _comment(f"wait until job {job} has left COMPLETING, then:"),
            f"scontrol update JobId={job} ReqNodeList={target} StartTime=now",
            f"scontrol release {job}",
        ]
    if action.kind == ActionKind.RELEASE:
        return _cannot(
            "Slurm",
            action,
            "Slurm frees a job's GPUs only when it ends; lower its time limit "
            f"(scontrol update JobId={job} TimeLimit=MINUTES) or signal it "
            f"(scancel --full --signal=NAME {job}), as --slurm-idle-action does",
        )
    return _cannot(
        "Slurm",
        action,
        "Slurm does not change a running job's CPU or memory binding; resubmit it with "
        "--cpu-bind=cores --mem-bind=local --gres-flags=enforce-binding",
    )


def _raw_create(path: str, body: Mapping[str, object]) -> str:
    text = json.dumps(body, sort_keys=True, separators=(",", ":"))
    return f"printf '%s' {shlex.quote(text)} | kubectl create --raw {shlex.quote(path)} -f -"


def kubectl_commands(action: ActionRequest, node: str, context: CommandContext) -> list[str]:
    """A pod binding for a pending pod's placement, an eviction for a move or a release of
    GPUs (the pod's controller starts it again, where the scheduler decides). A running
    workload's pod comes from its metrics (``context.pods``); a pending one is named
    ``namespace/name`` by the Kubernetes backend.
    """
    pod = context.pods.get(f"{node}/{action.workload}")
    if pod is None and action.kind == ActionKind.PLACE and action.workload.count("/") == 1:
        namespace, _, name = action.workload.partition("/")  # a pending pod, as the backend
        pod = (namespace, name)  # names it: namespace/name
    if pod is None or not all(is_node_name(p) for p in pod):
        return _cannot("kubectl", action, "no valid pod and namespace known for the workload")
    namespace, name = pod
    base = f"/api/v1/namespaces/{namespace}/pods/{name}"
    meta = {"name": name, "namespace": namespace}
    if action.kind == ActionKind.PLACE and action.node and is_node_name(action.node):
        binding = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": meta,
            "target": {"apiVersion": "v1", "kind": "Node", "name": action.node},
        }
        return [_raw_create(f"{base}/binding", binding)]
    if action.kind in (ActionKind.MIGRATE, ActionKind.RELEASE):
        eviction = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": meta}
        return [_raw_create(f"{base}/eviction", eviction)]
    return _cannot(
        "kubectl",
        action,
        "CPU and memory placement is the kubelet's (static CPU and memory manager "
        "policies); apply it through the node agent instead",
    )


#: backend name -> its renderer
RENDERERS: Mapping[str, Renderer] = {
    "sim": http_call,
    "agent": http_call,
    "dry-run": http_call,
    "slurm": slurm_commands,
    "kubernetes": kubectl_commands,
}


def render_commands(report: Report, backend: str, context: CommandContext) -> str:
    """A shell script applying ``report`` through ``backend``: for each recommendation (by
    gain) a comment naming it, then its actions' commands; ``KeyError`` for a backend
    without a renderer (:data:`RENDERERS` lists those that have one).
    """
    render = RENDERERS[backend]
    context = replace(context, rm_url=context.rm_url or DEFAULT_URLS.get(backend))
    lines = [
        _comment(
            f"toposcope advise --dry-run: {len(report.recommendations)} "
            f"recommendation(s) for --resource-manager {backend}"
        )
    ]
    for rec in report.by_gain():
        lines.append(_comment(f"{rec.id}: {rec.summary}"))
        if not rec.actions:
            lines.append(_comment("advice for a person: no action to run"))
        for action in rec.actions:
            lines += render(action, action.node or rec.target.node, context)
    return "\n".join(lines) + "\n"
