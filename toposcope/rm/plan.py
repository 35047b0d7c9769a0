"""Plans: what a resource-manager backend will do for one action, as data.

A backend turns an :class:`~toposcope.rm.models.ActionRequest` into a :class:`Plan`: the
ordered, concrete steps it will carry out (API requests with their bodies, commands with their
arguments, files it writes, and the waits between them), the preconditions it checked on the
way, what it could not know (the cluster was not reachable, an owner was not read), and, when
it would refuse the action, why. Applying executes exactly a plan's steps; ``--dry-run``
renders exactly the same plan as a shell script (:mod:`toposcope.rm.plan_script`), so the two
cannot drift apart.

Steps hold only checked values: a backend validates names from metrics (job ids, node names,
namespaces, unit names) before it puts them in a step, and the renderer shell-quotes every
word anyway.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from toposcope.rm.models import ActionKind, ActionRequest

#: the kinds a node agent (one host) carries out; the others are a scheduler's
AGENT_KINDS = frozenset({ActionKind.PIN, ActionKind.MIGRATE_MEMORY})
#: why a node agent refuses the other kinds (its 400 answer, and the dry run's comment)
NOT_ON_ONE_HOST = "not supported on a single host: use the scheduler"


@dataclass(frozen=True)
class HttpStep:
    """One API request: ``method`` on ``url`` with a JSON ``body``.

    ``api`` says whose API it is, which decides how a script spells it: ``rm`` (the
    resource-manager API, ``curl`` with ``$TOKEN``), ``slurmrestd`` (``curl`` with
    ``$SLURM_JWT``) or ``kubernetes`` (``kubectl``; ``url`` is then the API server path).
    ``content_type`` is the body's media type (a JSON merge patch for Kubernetes patches);
    ``headers`` are further headers that carry no secret (slurmrestd's user name).
    """

    method: str
    url: str
    body: object = None
    api: str = "rm"
    content_type: str = "application/json"
    what: str = ""
    headers: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class CommandStep:
    """One command, as its argument list (never a shell line)."""

    argv: tuple[str, ...]
    what: str = ""


@dataclass(frozen=True)
class FileStep:
    """One file written with ``content`` (a cgroup or sysfs attribute, a drop-in)."""

    path: str
    content: str
    what: str = ""


@dataclass(frozen=True)
class WaitStep:
    """A wait between two steps, until ``until`` holds (bounded by ``timeout_s``).

    ``check`` is a command whose success means the wait is over, when there is one a script
    can run in a loop; otherwise the script says, as a comment, what to wait for.
    """

    until: str
    timeout_s: float = 0.0
    check: tuple[str, ...] = ()


Step = HttpStep | CommandStep | FileStep | WaitStep


@dataclass(frozen=True)
class Plan:
    """What ``backend`` will do for ``request`` (see the module docstring).

    ``refused`` is empty when the backend would carry the action out; otherwise it says why
    not (and ``steps`` is empty). ``checked`` lists the preconditions the backend verified
    against the live system, ``unknown`` what it could not check (and why), ``notes`` what
    the operator should know besides (a submission flag for next time, a kubelet setting).
    """

    request: ActionRequest
    backend: str
    steps: tuple[Step, ...] = ()
    checked: tuple[str, ...] = ()
    unknown: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    refused: str = ""

    @property
    def runnable(self) -> bool:
        """Whether the backend would carry it out (not refused)."""
        return not self.refused


@dataclass(frozen=True)
class WorkloadHints:
    """What the report's metrics say about a workload, for a backend planning without its own
    reads: its pod, namespace and container, its cgroup path.
    """

    namespace: str = ""
    pod: str = ""
    container: str = ""
    cgroup: str = ""


@dataclass(frozen=True)
class PlanHints:
    """What a plan may use beyond the action: workloads by ``node/workload``."""

    workloads: Mapping[str, WorkloadHints] = field(default_factory=dict)

    def of(self, request: ActionRequest) -> WorkloadHints:
        """The hints for the request's workload on its node (empty when none)."""
        return self.workloads.get(f"{request.node or ''}/{request.workload}", WorkloadHints())


@runtime_checkable
class Planner(Protocol):
    """A backend that can say what it would do for an action without doing it."""

    def plan(self, request: ActionRequest, hints: PlanHints | None = None) -> Plan:
        """The plan for ``request``; never raises for a refusal (it is ``Plan.refused``)."""
        ...


def refused(
    request: ActionRequest,
    backend: str,
    why: str,
    *,
    checked: tuple[str, ...] = (),
    unknown: tuple[str, ...] = (),
    notes: tuple[str, ...] = (),
) -> Plan:
    """A plan that refuses ``request`` for ``why``."""
    return Plan(request, backend, (), checked, unknown, notes, why)


__all__ = [
    "AGENT_KINDS",
    "NOT_ON_ONE_HOST",
    "CommandStep",
    "FileStep",
    "HttpStep",
    "Plan",
    "PlanHints",
    "Planner",
    "Step",
    "WaitStep",
    "WorkloadHints",
    "refused",
]
