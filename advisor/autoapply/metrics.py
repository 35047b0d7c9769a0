"""The automatic loop's metrics (``toposcope_advisor_auto_*``, defined in the catalogue).

Counted since the process started (the decision log keeps the history): decisions by
recommendation kind and decision, skips by refusal code (every automatic kind, decision and
code exported even at zero, for alerts); whether the loop may act now and whether it is
stopped; when it last ran.
"""

from __future__ import annotations

from prometheus_client.core import Metric

from toposcope.advisor.autoapply.config import AUTOMATIC_KINDS
from toposcope.advisor.autoapply.decisions import DECISIONS
from toposcope.advisor.autoapply.limits import CODES
from toposcope.advisor.autoapply.loop import AutoApplier
from toposcope.catalogue import families_text, spec

#: skip codes besides the policy's: the applier left it as it was, the dry run refused it
OTHER_CODES = ("applier", "dry-run")


def auto_families(auto: AutoApplier, now: float) -> list[Metric]:
    """The ``toposcope_advisor_auto_*`` families of ``auto`` at Unix time ``now``."""
    decided = spec("toposcope_advisor_auto_decisions_total").family()
    counts = auto.counts
    kinds = sorted(AUTOMATIC_KINDS | {kind for kind, _ in counts})
    for kind in kinds:
        for decision in sorted(set(DECISIONS) | {d for k, d in counts if k == kind}):
            decided.add_metric([kind, decision], counts[(kind, decision)])
    skipped = spec("toposcope_advisor_auto_skipped_total").family()
    codes = auto.skips
    for code in sorted(set(CODES) | set(OTHER_CODES) | set(codes)):
        skipped.add_metric([code], codes[code])
    halted = auto.halted()
    active = spec("toposcope_advisor_auto_active").family()
    active.add_metric([], 0 if halted or auto.blackout(now) else 1)
    stopped = spec("toposcope_advisor_auto_stopped").family()
    stopped.add_metric([], 1 if halted else 0)
    found: list[Metric] = [decided, skipped, active, stopped]
    if auto.last_tick is not None:
        tick = spec("toposcope_advisor_auto_last_tick_timestamp_seconds").family()
        tick.add_metric([], auto.last_tick)
        found.append(tick)
    return found


def auto_exposition(auto: AutoApplier, now: float) -> bytes:
    """The families of ``auto`` in the Prometheus text format."""
    return families_text(auto_families(auto, now))
