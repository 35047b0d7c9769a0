"""The verdicts on applied recommendations: from a baseline and a later measurement (see
:mod:`toposcope.advisor.verification_figures`), whether a change was harmful, paid or
neutral, or is still pending, with the reason and the gain it measured. The rule is
described in :mod:`toposcope.advisor.outcomes`.
"""

from __future__ import annotations

from collections.abc import Sequence

from toposcope.advisor.verification_rule import MIN_GPU_UTILIZATION, VerificationRule
from toposcope.report.advisor_api import Measurement, Verdict


def judge(rule: VerificationRule, before: Measurement, after: Measurement) -> tuple[Verdict, str]:
    """The verdict on a change from its baseline and a later measurement, with the reason."""
    h = rule.harm_threshold
    harms = []
    if (
        before.cores is not None
        and before.cores >= rule.min_cores
        and after.cores is not None
        and after.cores < before.cores * (1 - h)
    ):
        harms.append(f"CPU cores used fell from {before.cores:.2f} to {after.cores:.2f}")
    if (
        before.gpu_utilization is not None
        and before.gpu_utilization >= MIN_GPU_UTILIZATION
        and after.gpu_utilization is not None
        and after.gpu_utilization < before.gpu_utilization * (1 - h)
    ):
        harms.append(
            f"GPU utilization fell from {before.gpu_utilization:.0%} to {after.gpu_utilization:.0%}"
        )
    if (
        before.remote_share is not None
        and after.remote_share is not None
        and after.remote_share > before.remote_share + h
    ):
        harms.append(
            f"remote share rose from {before.remote_share:.0%} to {after.remote_share:.0%}"
        )
    if harms:
        return Verdict.HARMFUL, "; ".join(harms)
    if before.remote_share is None or after.remote_share is None:
        return Verdict.PENDING, "no locality figure to compare yet"
    change = f"remote share {before.remote_share:.0%} -> {after.remote_share:.0%}"
    if after.remote_share <= before.remote_share * (1 - rule.paid_share):
        return Verdict.PAID, change
    return Verdict.NEUTRAL, f"{change}: less than {rule.paid_share:.0%} of it removed"


#: a judgement: the verdict, why, and the measured gain it rests on (``None``: none)
Judgement = tuple[Verdict, str, float | None]


def judge_locality(rule: VerificationRule, before: Measurement, after: Measurement) -> Judgement:
    """:func:`judge` for a pin or memory migration, with the change of the job's progress
    metric as its measured gain where one was read before and after (said in the detail;
    the verdict still rests on locality and the proxies).
    """
    verdict, detail = judge(rule, before, after)
    if before.progress is None or after.progress is None or before.progress <= 0:
        return verdict, detail, None
    gain = after.progress / before.progress - 1.0
    shown = f"progress metric {_shown('progress metric', before.progress)} -> "
    shown += f"{_shown('progress metric', after.progress)} ({gain:+.0%})"
    return verdict, f"{detail}; {shown}", gain


#: the progress signals of a job, most trusted first: (field of Measurement, its name)
PROGRESS_SIGNALS = (
    ("progress", "progress metric"),
    ("sm_active", "SM active"),
    ("gpu_utilization", "GPU utilization"),
)


def _signal(before: Measurement, after: Measurement) -> tuple[str, float, float] | None:
    """The most trusted progress signal measured both times (before it above zero)."""
    for name, label in PROGRESS_SIGNALS:
        old, new = getattr(before, name), getattr(after, name)
        if old is not None and new is not None and old > 0:
            return label, old, new
    return None


def _shown(label: str, value: float) -> str:
    return f"{value:.3g}/s" if label == "progress metric" else f"{value:.0%}"


def move_change(
    rule: VerificationRule, before: Measurement, after: Measurement
) -> tuple[float, str] | None:
    """The change of a moved job's most trusted progress signal measured both times: its
    relative gain and, in words, the signal before and after (with link traffic that fell by
    more than the harm threshold); ``None`` when no signal was measured both times.
    """
    signal = _signal(before, after)
    if signal is None:
        return None
    label, old, new = signal
    gain = new / old - 1.0
    change = f"{label} {_shown(label, old)} -> {_shown(label, new)} ({gain:+.0%})"
    h = rule.harm_threshold
    links_old, links_new = before.link_bytes_per_second, after.link_bytes_per_second
    if links_old is not None and links_new is not None and links_new < links_old * (1 - h):
        change += f"; link traffic fell from {links_old:.3g} to {links_new:.3g} B/s"
    return gain, change


def judge_move(
    rule: VerificationRule, before: Measurement, after: Measurement, estimated: float | None
) -> Judgement:
    """The verdict on a job move from its progress before and after (the rule:
    :mod:`toposcope.advisor.outcomes`).
    """
    found = move_change(rule, before, after)
    if found is None:
        return Verdict.PENDING, "no progress signal measured before and after yet", None
    gain, change = found
    h = rule.harm_threshold
    if gain < -h:
        return Verdict.HARMFUL, change, gain
    wanted = rule.paid_share * max(estimated or 0.0, 0.0)
    if gain > 0 and gain >= wanted:
        return Verdict.PAID, change, gain
    return Verdict.NEUTRAL, f"{change}: less than {wanted:.0%} gained", gain


def judge_placement(after: Measurement) -> Judgement:
    """The verdict on a placement from the placed job's progress (the rule:
    :mod:`toposcope.advisor.outcomes`).
    """
    for name, label in PROGRESS_SIGNALS:
        value = getattr(after, name)
        if value is None:
            continue
        floor = 0.0 if name == "progress" else MIN_GPU_UTILIZATION
        shown = f"{label} {_shown(label, value)}"
        if value > floor:
            return Verdict.PAID, f"running where placed: {shown}", None
        return Verdict.NEUTRAL, f"running where placed but idle: {shown}", None
    return Verdict.PENDING, "no progress signal for the placed job yet", None


def judge_release(
    rule: VerificationRule, after: Measurement | None, waited: float, gpus: Sequence[int]
) -> Judgement:
    """The verdict on a release from who holds the released GPUs now (the rule:
    :mod:`toposcope.advisor.outcomes`).
    """
    if after is None or after.gpus_free is None:
        return Verdict.PENDING, f"no series for GPUs {list(gpus)} in this analysis", None
    if after.gpus_free < len(gpus):
        return Verdict.PENDING, f"GPUs {list(gpus)} are still held by the workload", None
    if after.gpus_reused:
        reused = int(after.gpus_reused)
        return Verdict.PAID, f"GPUs {list(gpus)} freed; {reused} reused by others", None
    if waited >= rule.verify_after_seconds + rule.reuse_window_seconds:
        return (
            Verdict.NEUTRAL,
            f"GPUs {list(gpus)} freed but not reused within {rule.reuse_window_seconds:g}s",
            None,
        )
    return Verdict.PENDING, f"GPUs {list(gpus)} freed; waiting for another workload", None
