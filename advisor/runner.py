"""One advisor run: load -> model -> policies -> report (krr's runner, without globals).

Everything the run depends on is an argument: the backend, the window, the policy instances,
the minimum gain. The same function backs the CLI, the tests and, later, the service.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from toposcope import __version__
from toposcope.advisor.calibration import KindCalibration, calibrate
from toposcope.advisor.capacity_ledger import CapacityLedger
from toposcope.advisor.job_deadlines import JobDeadline, with_deadlines
from toposcope.advisor.loaders.base import MetricsBackend, Query, Window
from toposcope.advisor.loaders.queries import load_all, queries
from toposcope.advisor.memory_matrix import MemoryOption, with_measured_memory
from toposcope.advisor.model import ClusterModel, PendingWorkload
from toposcope.advisor.model_builder import build_model
from toposcope.advisor.p2p_matrix import P2pOption, with_measured_links
from toposcope.advisor.policies import Policy, evaluate_all
from toposcope.advisor.recommendations import filter_min_gain, resolve_conflicts
from toposcope.report.recommendation import Note, Recommendation, Report, RunInfo


def load_model(
    backend: MetricsBackend,
    window: Window,
    *,
    selector: str = "",
    node_label: str = "auto",
    pending: Iterable[PendingWorkload] = (),
    needs: Sequence[Query] | None = None,
    p2p: Sequence[P2pOption] = (),
    memory: Sequence[MemoryOption] = (),
    deadlines: Sequence[JobDeadline] = (),
) -> ClusterModel:
    """Run the queries against ``backend`` and build the model (with the measured GPU-pair
    bandwidths of ``p2p``, from ``--p2p-bandwidth``, the measured memory bandwidths of
    ``memory``, from ``--memory-bandwidth``, and the jobs' configured ``deadlines``,
    from ``--job-deadlines``, counted from the window's end). The backend is refreshed first,
    so that each analysis of a long-running service reads its targets anew.
    """
    backend.refresh()
    needed = needs if needs is not None else queries(selector)
    data = load_all(backend, window, needed, node_label=node_label)
    model = build_model(data, node_label=node_label, pending=pending)
    now = window.end if window.end is not None else time.time()
    model = with_measured_memory(with_measured_links(model, p2p), memory)
    return with_deadlines(model, deadlines, now)


def assemble(
    run: RunInfo,
    found: Iterable[Recommendation],
    undecided: Iterable[Note],
    min_gain: float,
    data_notes: Iterable[str] = (),
    ledger: CapacityLedger | None = None,
    calibration: Mapping[str, KindCalibration] | None = None,
) -> Report:
    """Scale estimates by the ``calibration`` of their kind or cell (node types and link
    tiers from ``ledger``'s model), filter by ``min_gain``,
    resolve conflicts (claims, then the round's CPU capacity in ``ledger``) and build the
    report.
    """
    model = ledger.model if ledger is not None else None
    kept, below = filter_min_gain(calibrate(found, calibration or {}, model), min_gain)
    kept, conflicts = resolve_conflicts(kept, ledger)
    notes = [Note("loader", "*", n) for n in data_notes]
    notes += [*undecided, *conflicts, *below]
    return Report(run, tuple(sorted(kept, key=lambda r: (-r.estimated_gain, r.id))), tuple(notes))


def advise(
    model: ClusterModel,
    policies: Sequence[Policy[Any]],
    *,
    min_gain: float = 0.05,
    started: float | None = None,
    calibration: Mapping[str, KindCalibration] | None = None,
) -> Report:
    """Evaluate ``policies`` on ``model`` and return the report (estimates calibrated by
    ``calibration``, see :mod:`toposcope.advisor.calibration`).
    """
    begin = started if started is not None else time.time()
    evaluations = evaluate_all(policies, model)
    run = RunInfo(
        started_at=datetime.fromtimestamp(begin, UTC).isoformat(timespec="seconds"),
        source=model.source,
        window=model.window,
        policies=tuple(p.name for p in policies),
        min_gain=min_gain,
        duration_seconds=round(time.time() - begin, 3),
        version=__version__,
        settings={p.name: p.settings.as_dict() for p in policies},
    )
    return assemble(
        run,
        [r for e in evaluations for r in e.recommendations],
        [n for e in evaluations for n in e.undecided],
        min_gain,
        model.notes,
        CapacityLedger(model),
        calibration,
    )
