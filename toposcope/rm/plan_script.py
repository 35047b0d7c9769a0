"""A plan as a shell script an operator can review and paste.

:func:`plan_lines` spells each step of a :class:`~toposcope.rm.plan.Plan` as the command a
person would type for it: an argument list as a shell line, a resource-manager or slurmrestd
request as ``curl`` (the token left as ``$TOKEN`` or ``$SLURM_JWT``: its value is never
printed), a Kubernetes request as ``kubectl`` (``patch`` for a merge patch, ``create --raw``
for a POST such as an eviction), a file as ``printf ... > FILE``, a wait as an ``until`` loop.
What the backend checked, could not check, refuses and wants the operator to know are ``#``
comments, so that the script stays valid for ``bash -n``.

Every word that comes from outside (names from metric labels, bodies) goes through
:func:`shlex.quote`; comments show control characters as escapes and never span lines.
"""

from __future__ import annotations

import json
import re
import shlex

from toposcope.rm.plan import CommandStep, FileStep, HttpStep, Plan, Step, WaitStep

#: a Kubernetes API path: core (``/api/v1``) or a group's (``/apis/GROUP/VERSION``), namespaced
_KUBE_PATH = re.compile(
    r"/(?:api/v1|apis/(?P<group>[a-z0-9.-]+)/[a-z0-9]+)/namespaces/(?P<ns>[^/]+)/"
    r"(?P<resource>[a-z0-9]+)/(?P<name>[^/]+)(?:/(?P<sub>[a-z]+))?"
)
#: the longest comment line written, characters (longer texts are cut with an ellipsis)
MAX_COMMENT = 2000


def comment(text: str) -> str:
    """``text`` as one ``#`` line: control characters escaped, whitespace runs collapsed."""
    shown = "".join(
        " " if c.isspace() else c if c.isprintable() else f"\\x{ord(c):02x}" for c in text
    )
    line = " ".join(shown.split())
    if len(line) > MAX_COMMENT:
        line = line[: MAX_COMMENT - 3] + "..."
    return "# " + line


def _json(body: object) -> str:
    return json.dumps(body, sort_keys=True, separators=(",", ":"))


def _curl(step: HttpStep) -> str:
    header = (
        '"X-SLURM-USER-TOKEN: $SLURM_JWT"'
        if step.api == "slurmrestd"
        else '"Authorization: Bearer $TOKEN"'
    )
    words = ["curl -fsS -X", shlex.quote(step.method), "-H", header]
    for name, value in step.headers:
        words += ["-H", shlex.quote(f"{name}: {value}")]
    if step.body is not None:
        words += [
            "-H",
            shlex.quote(f"Content-Type: {step.content_type}"),
            "--data",
            shlex.quote(_json(step.body)),
        ]
    return " ".join([*words, shlex.quote(step.url)])


def _kubectl(step: HttpStep) -> str:
    found = _KUBE_PATH.fullmatch(step.url)
    body = shlex.quote(_json(step.body))
    if step.method == "PATCH" and found is not None:
        group = found.group("group")
        resource = found.group("resource") + (f".{group}" if group else "")
        words = ["kubectl patch", shlex.quote(resource), shlex.quote(found.group("name"))]
        words += ["--namespace", shlex.quote(found.group("ns"))]
        if found.group("sub"):
            words.append(f"--subresource={shlex.quote(found.group('sub'))}")
        kind = {"application/merge-patch+json": "merge", "application/json-patch+json": "json"}
        patch = kind.get(step.content_type, "strategic")
        return " ".join([*words, f"--type={patch}", "-p", body])
    verb = {"POST": "create", "PUT": "replace"}.get(step.method)
    if verb is None:
        raise ValueError(f"no kubectl form for {step.method} {step.url}")
    return f"printf '%s' {body} | kubectl {verb} --raw {shlex.quote(step.url)} -f -"


def step_lines(step: Step) -> list[str]:
    """The script lines of one step (a ``#`` line saying what it does first, when it says)."""
    if isinstance(step, WaitStep):
        lines = [comment(f"wait until {step.until}")]
        if step.check:
            if step.timeout_s:
                lines[-1] += f" (at most {step.timeout_s:g} s)"
            lines.append(f"until {shlex.join(step.check)}; do sleep 1; done")
        return lines
    lines = [comment(step.what)] if step.what else []
    if isinstance(step, CommandStep):
        lines.append(shlex.join(step.argv))
    elif isinstance(step, FileStep):
        lines.append(f"printf '%s\\n' {shlex.quote(step.content)} > {shlex.quote(step.path)}")
    elif step.api == "kubernetes":
        lines.append(_kubectl(step))
    else:
        lines.append(_curl(step))
    return lines


def plan_lines(plan: Plan) -> list[str]:
    """The script lines of ``plan``: what was checked and not, then its steps or its refusal."""
    req = plan.request
    where = f" on {req.node}" if req.node else ""
    lines = [comment(f"{plan.backend}: {req.kind} {req.workload}{where} ({req.request_id})")]
    lines += [comment(f"checked: {text}") for text in plan.checked]
    lines += [comment(f"not checked: {text}") for text in plan.unknown]
    if plan.refused:
        lines.append(comment(f"{plan.backend} refuses this action: {plan.refused}"))
    for step in plan.steps:
        lines += step_lines(step)
    lines += [comment(f"note: {text}") for text in plan.notes]
    return lines


__all__ = ["MAX_COMMENT", "comment", "plan_lines", "step_lines"]
