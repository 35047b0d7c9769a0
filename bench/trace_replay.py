"""Trace replay: what GPU placement is worth over days of a Philly-like job trace.

Replays a job trace (``--trace`` CSV, else the seeded synthetic Philly-like trace of
:mod:`toposcope.sim.trace_gen`) on a heterogeneous simulated cluster (``--cluster``: 8
DGX A100, 8 PCIe 8-GPU with two switches, 16 PCIe 4-GPU nodes; 192 GPUs) once per
placement policy (:mod:`trace_policies`). No HTTP and no Prometheus: the simulator's clock
jumps from event to event (arrivals, finishes, restores) and after each one the policy
places pending jobs in arrival order (later jobs may pass one that does not fit; the
``toposcope`` policy may let a job wait for a better set, :mod:`trace_toposcope`). Policies
that migrate move running jobs (paying the simulator's checkpoint-restore time) so that
the oldest waiting job can start when enough GPUs are free but split over nodes.

Figures per policy: mean and p95 queueing delay (start minus arrival), mean job completion
time (finish minus arrival), mean locality slowdown (1 - run time at the best placement /
actual run time, so interference, bad links and migration pauses all count), GPU
utilisation (allocated share of all GPUs, time-averaged over the trace's span) and
fragmentation (free GPUs on nodes with fewer free GPUs than the smallest waiting request,
the catalogue's ``toposcope_queue_fragmented_gpus``, as a share of all GPUs, time-averaged).
Jobs still waiting or running when the replay stops (``--drain-days`` after the last
arrival) count with the stop time. Target: toposcope's mean queueing delay at most half
first-fit's, its locality slowdown at most 5% (``met``/``MISSED``; exit status 0).
``--plot FILE`` writes the queueing-delay CDF and utilisation over time (plotly HTML).

``--fabric`` replays multi-node gang jobs on a tree fabric instead, comparing fabric
placement policies (:mod:`fabric_replay`; its own options follow ``--fabric``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from trace_engine import replay
from trace_figures import figures, plot
from trace_policies import POLICIES

from toposcope.errors import ConfigError
from toposcope.sim.jobs import JobKind, JobSpec, make_job
from toposcope.sim.templates import NodeTemplate, builtin_template
from toposcope.sim.trace_gen import DAY_S, generate
from toposcope.sim.traces import load_trace

DEFAULT_CLUSTER = "dgx-a100=8,pcie-8gpu-2sw=8,pcie-4gpu=16"
TARGET_QUEUE_RATIO = 0.5
TARGET_SLOWDOWN = 0.05


def build_cluster(spec: str) -> dict[str, NodeTemplate]:
    """Nodes from ``TEMPLATE=COUNT,...`` (built-in templates), named ``TEMPLATE-NN``."""
    nodes: dict[str, NodeTemplate] = {}
    for part in spec.split(","):
        template_name, _, count = part.partition("=")
        try:
            template = builtin_template(template_name.strip())
            number = int(count)
        except (KeyError, ValueError):
            raise ConfigError(f"--cluster: bad entry {part!r} (want TEMPLATE=COUNT)") from None
        if not 1 <= number <= 1000:
            raise ConfigError(f"--cluster: count of {template_name} must be 1 to 1000")
        for i in range(number):
            nodes[f"{template.name}-{i + 1:02d}"] = template
    return nodes


def trace_jobs(args: argparse.Namespace, total_gpus: int, max_gpus: int) -> list[JobSpec]:
    """The trace's GPU jobs: from ``--trace`` or generated (seed, days, load); a
    :class:`ConfigError` when there are none or the cluster has no GPU.
    """
    if not total_gpus:
        raise ConfigError(f"--cluster: no node has a GPU ({args.cluster})")
    if args.trace:
        jobs = [j for j in load_trace(args.trace) if j.gpus and j.duration]
        too_big = [j.name for j in jobs if j.gpus > max_gpus]
        if too_big:
            raise ConfigError(
                f"{args.trace}: jobs ask for more GPUs than any node has: {too_big[:3]}"
            )
        if not jobs:
            raise ConfigError(f"{args.trace}: no GPU job with a run time to replay")
        return jobs
    rows = generate(args.seed, args.days, total_gpus, args.load)
    if not rows:
        raise ConfigError("the generated trace has no job (raise --days or --load)")
    return [
        make_job(
            r.name, JobKind.GPU_TRAIN, gpus=r.gpus, submit_time=r.submit_time, duration=r.duration
        )
        for r in rows
    ]


def parse_args() -> argparse.Namespace:
    """The command line (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument("--trace", type=Path, help="a trace CSV (default: generated)")
    parser.add_argument("--seed", type=int, default=1, help="generator seed (1)")
    parser.add_argument("--days", type=float, default=3.0, help="days of arrivals (3)")
    parser.add_argument("--load", type=float, default=0.9, help="offered GPU load (0.9)")
    parser.add_argument("--cluster", default=DEFAULT_CLUSTER, help=f"nodes ({DEFAULT_CLUSTER})")
    parser.add_argument(
        "--drain-days", type=float, default=2.0, help="days after the last arrival (2)"
    )
    parser.add_argument("--policies", default=",".join(p.name for p in POLICIES))
    parser.add_argument("--plot", type=Path, metavar="FILE", help="write the figure here")
    parser.add_argument("--json", action="store_true", help="print JSON only")
    parser.add_argument(
        "--fabric",
        action="store_true",
        help="replay gang jobs on a tree fabric (trace_replay.py --fabric --help for its options)",
    )
    args = parser.parse_args()
    if not 0 < args.days <= 60 or not 0 < args.load <= 10 or not 0 <= args.drain_days <= 60:
        parser.error("--days must be in (0, 60], --load in (0, 10], --drain-days in [0, 60]")
    if args.plot and not args.plot.parent.is_dir():
        parser.error(f"--plot: no such directory: {args.plot.parent}")
    return args


def main() -> int:
    """Replay the trace under every policy and print the figures."""
    if "--fabric" in sys.argv[1:]:
        import fabric_replay  # noqa: PLC0415 (only the fabric replay needs it)

        return fabric_replay.main([a for a in sys.argv[1:] if a != "--fabric"])
    args = parse_args()
    known = {p.name: p for p in POLICIES}
    try:
        wanted = [known[n.strip()] for n in args.policies.split(",")]
    except KeyError as exc:
        print(f"trace_replay: unknown policy {exc} (known: {', '.join(known)})", file=sys.stderr)
        return 2
    try:
        templates = build_cluster(args.cluster)
        total = sum(len(t.gpus) for t in templates.values())
        jobs = trace_jobs(args, total, max(len(t.gpus) for t in templates.values()))
    except ConfigError as exc:
        print(f"trace_replay: {exc}", file=sys.stderr)
        return 2
    span = max((j.submit_time for j in jobs), default=0.0)
    stop = span + args.drain_days * DAY_S
    runs, rows = [], []
    for policy in wanted:
        began = time.perf_counter()
        run = replay(policy, templates, jobs, stop)
        runs.append(run)
        rows.append(
            {
                **figures(run, jobs, span, min(stop, run.cluster.now)),
                "seconds": round(time.perf_counter() - began, 1),
            }
        )
    by_name = {r["policy"]: r for r in rows}
    target: dict[str, Any] = {}
    if "first-fit" in by_name and "toposcope" in by_name:
        ratio = by_name["toposcope"]["mean_queue_s"] / max(
            by_name["first-fit"]["mean_queue_s"], 1e-9
        )
        slowdown = by_name["toposcope"]["mean_locality_slowdown"]
        target = {
            "queue_ratio_to_first_fit": round(ratio, 3),
            "locality_slowdown": slowdown,
            "met": ratio <= TARGET_QUEUE_RATIO and slowdown <= TARGET_SLOWDOWN,
        }
    result = {
        "trace": str(args.trace)
        if args.trace
        else f"generated seed {args.seed}, {args.days:g} days, load {args.load:g}",
        "cluster": args.cluster,
        "gpus": total,
        "jobs": len(jobs),
        "policies": rows,
        "target": target,
    }
    if args.plot:
        try:
            plot(args.plot, runs, jobs, stop)
        except OSError as exc:
            print(f"trace_replay: cannot write {args.plot}: {exc.strerror or exc}", file=sys.stderr)
            return 2
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"trace replay: {result['trace']}, {len(jobs)} jobs on {total} GPUs ({args.cluster})")
    print(
        f"{'policy':11} {'meanQ h':>8} {'p95Q h':>8} {'JCT h':>7} {'slow':>6} {'util':>6} "
        f"{'frag':>6} {'moves':>6}"
    )
    for r in rows:
        print(
            f"{r['policy']:11} {r['mean_queue_s'] / 3600:8.2f} {r['p95_queue_s'] / 3600:8.2f} "
            f"{r['mean_jct_s'] / 3600:7.2f} {r['mean_locality_slowdown']:6.1%} "
            f"{r['gpu_utilisation']:6.1%} {r['fragmented_share']:6.1%} {r['migrations']:6d}"
        )
    if target:
        print(
            f"toposcope queue / first-fit {target['queue_ratio_to_first_fit']:.2f} "
            "(target <= 0.5), "
            f"slowdown {target['locality_slowdown']:.1%} (target <= 5%): "
            + ("met" if target["met"] else "MISSED")
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
