"""What an applied recommendation did, as the recommendations page shows it: the verdict of
the advisor's verification (:class:`~toposcope.report.advisor_api.Verification`), the gain it
measured against the one it estimated, the figures measured before and after the change,
each job's part when the change moved several, when it was verified, and whether the change
was reverted. Built without I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

from dash import html

from toposcope.dashboards.app.advisorclient import AuditRow
from toposcope.dashboards.app.components import banner
from toposcope.dashboards.app.recommendation_views import status_of
from toposcope.report.advisor_api import JobOutcome, Measurement, Verdict, Verification

SECTION_TITLE = "What the advice did"

#: the banner colour of each verdict: paid is good news, harmful bad, the rest neutral
VERDICT_BANNER = {
    Verdict.PAID: "ok",
    Verdict.HARMFUL: "error",
}

#: what each verdict says, after the verdict itself
VERDICT_MEANING = {
    Verdict.PENDING: "not judged yet: the advisor waits for the change to settle",
    Verdict.PAID: "the change gained what it was meant to",
    Verdict.NEUTRAL: "the change gained too little, and did no harm",
    Verdict.HARMFUL: "the change made things worse",
    Verdict.UNDETERMINED: "the advisor could not measure the change",
    Verdict.REVERTED: "the change was reverted before it was judged",
}


def _share(value: float) -> str:
    return f"{value:.1%}"


def _number(value: float) -> str:
    return f"{value:.4g}"


def _bytes_per_second(value: float) -> str:
    for unit in ("B/s", "kB/s", "MB/s", "GB/s"):
        if abs(value) < 1000:
            return f"{value:.3g} {unit}"
        value /= 1000
    return f"{value:.3g} TB/s"


#: the measured figures, in the order shown: field of :class:`Measurement`, label, format
MEASURES: tuple[tuple[str, str, Callable[[float], str]], ...] = (
    ("progress", "progress signal", _number),
    ("sm_active", "SM active", _share),
    ("gpu_utilization", "GPU utilisation", _share),
    ("link_bytes_per_second", "link traffic (PCIe + NVLink)", _bytes_per_second),
    ("remote_share", "remote memory share", _share),
    ("cores", "CPU cores busy", _number),
    ("gpus_free", "GPUs freed", _number),
    ("gpus_reused", "GPUs reused by others", _number),
)


def verdicts_by_recommendation(items: Iterable[Verification]) -> dict[str, str]:
    """Each verified recommendation's verdict, by recommendation id (the table's column)."""
    return {v.recommendation_id: str(v.verdict) for v in items}


def when(seconds: float | None) -> str:
    """Unix ``seconds`` as a UTC time for the page, or ``not yet``."""
    if seconds is None or seconds <= 0:
        return "not yet"
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def gain_text(item: Verification) -> str:
    """The measured gain against the estimated one, saying which is missing."""
    estimated = (
        f"an estimated {item.estimated_gain:.1%}"
        if item.estimated_gain is not None
        else "no estimate"
    )
    if item.measured_gain is None:
        return f"measured gain: none measured ({estimated})"
    return f"measured gain {item.measured_gain:+.1%} against {estimated}"


def reverted_text(item: Verification, audit: Sequence[AuditRow]) -> str:
    """Whether the change was reverted, from the audit log and the verdict."""
    if status_of(audit) == "reverted" or item.verdict == Verdict.REVERTED:
        return "reverted: yes"
    if item.verdict == Verdict.HARMFUL:
        return "reverted: no (the verdict's detail says why)"
    return "reverted: no"


def measurement_rows(before: Measurement, after: Measurement | None) -> list[html.Tr]:
    """One row per figure measured before or after the change: name, before, after."""
    rows: list[html.Tr] = []
    for name, label, shown in MEASURES:
        old = getattr(before, name)
        new = getattr(after, name) if after is not None else None
        if old is None and new is None:
            continue
        rows.append(
            html.Tr(
                [
                    html.Td(label),
                    html.Td("-" if old is None else shown(old)),
                    html.Td("-" if new is None else shown(new)),
                ]
            )
        )
    return rows


def job_label(job: JobOutcome, made_for: str = "") -> str:
    """A job's name in the jobs table: the target marked (a clearing's as the job cleared
    for), a job a clearing moved aside with the GPUs it freed.
    """
    if job.target:
        return f"{job.job} (cleared for)" if made_for else f"{job.job} (target)"
    if made_for and job.from_gpus:
        return f"{job.job} (freed {job.from_node} GPUs {list(job.from_gpus)})"
    return job.job


def job_table(jobs: Sequence[JobOutcome], made_for: str = "") -> html.Table:
    """One row per job a recommendation that changes several moved: the job (the target
    marked; ``made_for``: a clearing's), its weight in the combined gain, its own measured
    gain and what it rests on.
    """
    rows = [
        html.Tr(
            [
                html.Td(job_label(j, made_for)),
                html.Td(f"{j.weight:.3g}" if j.weight > 0 else "harm only"),
                html.Td("-" if j.measured_gain is None else f"{j.measured_gain:+.1%}"),
                html.Td(j.detail or "-"),
            ]
        )
        for j in jobs
    ]
    head = [html.Th("job"), html.Th("weight"), html.Th("measured gain"), html.Th("signal")]
    return html.Table(
        [html.Thead(html.Tr(head)), html.Tbody(rows)], className="simple verification-jobs"
    )


def what_it_did(item: Verification | None, audit: Sequence[AuditRow]) -> html.Div:
    """The "What the advice did" section of one recommendation: its verdict, gain, figures
    before and after (and each job's part when it changed several), when it was verified
    and whether it was reverted; a line saying it is not applied when there is no
    verification.
    """
    if item is None:
        body: list[Any] = [banner("not applied: nothing to verify yet", "info")]
    else:
        verdict = item.verdict
        rows = measurement_rows(item.baseline, item.measured)
        body = [
            banner(
                f"{verdict}: {VERDICT_MEANING[verdict]}",
                VERDICT_BANNER.get(verdict, "info"),
            ),
            html.P(gain_text(item), className="verification-gain"),
            html.Table(
                [
                    html.Thead(html.Tr([html.Th("figure"), html.Th("before"), html.Th("after")])),
                    html.Tbody(rows),
                ],
                className="simple",
            )
            if rows
            else banner("nothing was measured", "info"),
            job_table(item.jobs, item.made_for) if item.jobs else None,
            html.P(f"applied {when(item.applied_at)}; verified {when(item.verified_at)}"),
            html.P(reverted_text(item, audit), className="verification-reverted"),
            html.P(item.detail) if item.detail else None,
        ]
    return html.Div(
        [html.H3(SECTION_TITLE), *body],
        id="recs-verification",
        className=f"verification {item.verdict if item else 'none'}",
    )
