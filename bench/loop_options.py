"""How the closed loop's rounds run (:class:`LoopOptions`): the advisor's window and action
limits, the Prometheus binary, what each round keeps and learns, and the measured files and
fabric the advisor is given. :func:`judge_loop.run_rounds` runs the rounds with them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from toposcope.sim.scenario_fabric import ScenarioFabric


@dataclass(frozen=True)
class LoopOptions:
    """How the rounds run: the advisor's window (seconds), the most rounds, the advisor's
    action limits, the Prometheus binary, where to keep each round's report (if at all),
    and whether each round calibrates from the verified outcomes of the rounds before it
    (:mod:`loop_learning`), and what those verdicts measure a job's progress by:
    ``counter`` (each job's step counter, the simulator's ``/jobs/metrics``, as a
    ``--progress-metric``) or ``proxies`` (SM active, link bytes, GPU utilization, cores).
    ``fabric``, for a scenario with gang jobs: the simulator serves its fabric families on
    ``/metrics`` (scraped too) and the advisor's fabric policies read its fabric file.
    ``p2p``: node -> the peer bandwidth file measured on it (:mod:`toposcope.sim.p2p_measure`),
    given to the advisor as ``--p2p-bandwidth``; empty: none measured. ``memory``: node ->
    the memory bandwidth file measured on it (:mod:`toposcope.sim.memory_measure`), given as
    ``--memory-bandwidth``; empty: none measured.
    ``outcome_store``: an outcome log kept across runs (``--learn-across-seeds``): its
    settled outcomes are copied into the run's audit log before round 1 and the run's own
    added to it after the last (:func:`loop_learning.carry_outcomes`); ``rounds_before``:
    the rounds those outcomes came from, so that each round and action also carries its
    ``learning_round`` (its number counted over every run it learned from).
    """

    window: int = 15
    rounds: int = 6
    max_actions: int = 50
    max_actions_per_node: int = 8
    prometheus_binary: str = "prometheus"
    keep_reports: Path | None = None
    learn: bool = True
    progress: str = "counter"
    fabric: ScenarioFabric | None = None
    p2p: Mapping[str, Path] = field(default_factory=dict)
    memory: Mapping[str, Path] = field(default_factory=dict)
    outcome_store: Path | None = None
    rounds_before: int = 0
