"""An hour (or any span) of a simulated cluster's metrics, as a backfill file for a real TSDB.

Every node of a scenario is scraped through the exporter's own collectors (the simulator's
:class:`~toposcope.sim.nodefs.SimExporters`) once per ``step``, the simulated clock moving
``step`` seconds between rounds so that counters grow and utilizations change as they would
between real scrapes. Each round's samples get the labels a Prometheus scrape of the
simulator adds (``job``, ``instance``, ``node``) and the round's timestamp, and are streamed
to two files:

* ``history.om``: OpenMetrics text (timestamps in seconds, ``# TYPE`` once per family,
  ``# EOF`` at the end) for ``promtool tsdb create-blocks-from openmetrics``;
* ``history.prom``: the same samples in the Prometheus text format (timestamps in
  milliseconds), what VictoriaMetrics' ``/api/v1/import/prometheus`` reads.

Rounds are written in time order, so every series' samples are in order, which is all the
backfill needs; families of different nodes interleave (promtool accepts it). Run it alone to
write the files and print what was written as JSON::

    python bench/advisor_history.py --scenario builtin:cpu-numa --duration 2m --step 60s \\
        --end 1700000000 --out DIR
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

from toposcope.advisor.loaders import parse_duration
from toposcope.errors import ConfigError
from toposcope.sim.clock import SimClock
from toposcope.sim.nodefs import SimExporters
from toposcope.sim.scenarios import build_cluster, load_scenario

JOB = "toposcope-sim"
OPENMETRICS = "history.om"
PROMETHEUS_TEXT = "history.prom"
FACTS = "history.json"


@dataclass(frozen=True)
class History:
    """What :func:`generate` wrote: the two files, the span and how much it held."""

    scenario: str
    openmetrics: Path
    prometheus_text: Path
    start: float
    end: float
    step: float
    rounds: int
    nodes: int
    workloads: int
    series: int
    samples: int
    bytes_openmetrics: int
    seconds: float


def scrape_labels(node: str) -> str:
    """The labels a Prometheus scrape of ``node`` on the simulator adds, as label text."""
    return f'job="{JOB}",instance="sim:9850/{node}",node="{node}"'


def relabel(text: str, labels: str, families: set[str]) -> Iterator[tuple[str, str]]:
    """``(series, value)`` of every sample of an exporter's text, ``labels`` added, and
    ``("# TYPE", line)`` for each family not yet in ``families`` (added to it).

    A counter's family loses ``_total`` in its ``# TYPE`` line, as OpenMetrics names it. The
    value is the last word of a sample line (exporters write no timestamps).
    """
    for line in text.splitlines():
        if not line:
            continue
        if line.startswith("#"):
            words = line.split(" ")
            if len(words) == 4 and words[1] == "TYPE" and words[2] not in families:
                families.add(words[2])
                name = words[2]
                if words[3] == "counter" and name.endswith("_total"):
                    name = name[: -len("_total")]
                yield "# TYPE", f"# TYPE {name} {words[3]}\n"
            continue
        series, _, value = line.rpartition(" ")
        if series.endswith("{}"):
            series = f"{series[:-1]}{labels}}}"
        elif series.endswith("}"):
            series = f"{series[:-1]},{labels}}}"
        else:
            series = f"{series}{{{labels}}}"
        yield series, value


def generate(
    scenario_ref: str,
    out: Path,
    *,
    duration: float,
    step: float,
    end: float,
    progress: Callable[[str], None] | None = None,
) -> History:
    """Write ``duration`` seconds of ``scenario_ref`` ending at ``end`` (Unix seconds), one
    scrape round every ``step`` seconds, into ``out`` (see the module docstring).
    """
    if step <= 0 or duration < step:
        raise ConfigError(f"--step ({step:g} s) must be > 0 and at most --duration")
    rounds = int(duration // step) + 1
    start = end - (rounds - 1) * step
    scenario = load_scenario(scenario_ref)
    cluster = build_cluster(scenario, SimClock(seed=scenario.seed, speed=0))
    nodes = cluster.node_names()
    labels = {node: scrape_labels(node) for node in nodes}
    families: set[str] = set()
    samples = series = 0
    started = time.perf_counter()
    out.mkdir(parents=True, exist_ok=True)
    om_path, text_path = out / OPENMETRICS, out / PROMETHEUS_TEXT
    with (
        tempfile.TemporaryDirectory(prefix="toposcope-history-") as trees,
        om_path.open("w", encoding="utf-8") as om,
        text_path.open("w", encoding="utf-8") as text,
    ):
        exporters = SimExporters(cluster, Path(trees), background=False)
        try:
            for index in range(rounds):
                if index:
                    cluster.advance(step)
                stamp = int(start + index * step)
                om_stamp, text_stamp = f" {stamp}\n", f" {stamp * 1000}\n"
                in_round = 0
                for node in nodes:
                    scraped = exporters.scrape(node).decode()
                    for name, value in relabel(scraped, labels[node], families):
                        if name == "# TYPE":
                            om.write(value)
                            continue
                        sample = f"{name} {value}"
                        om.write(sample + om_stamp)
                        text.write(sample + text_stamp)
                        in_round += 1
                samples += in_round
                series = max(series, in_round)
                if progress is not None:
                    elapsed = time.perf_counter() - started
                    progress(f"round {index + 1}/{rounds}: {in_round} samples, {elapsed:.0f} s")
        finally:
            exporters.close()
        om.write("# EOF\n")
        seconds = time.perf_counter() - started  # not the removal of the node trees
    history = History(
        scenario=scenario_ref,
        openmetrics=om_path,
        prometheus_text=text_path,
        start=start,
        end=start + (rounds - 1) * step,
        step=step,
        rounds=rounds,
        nodes=len(nodes),
        workloads=len(scenario.jobs),
        series=series,
        samples=samples,
        bytes_openmetrics=om_path.stat().st_size,
        seconds=seconds,
    )
    (out / FACTS).write_text(json.dumps(facts(history)), encoding="utf-8")
    return history


def facts(history: History) -> dict[str, object]:
    """``history`` as JSON-ready facts (the files named, not their paths)."""
    return {k: v.name if isinstance(v, Path) else v for k, v in asdict(history).items()}


def read_history(out: Path) -> History | None:
    """The history :func:`generate` wrote into ``out`` earlier, or ``None`` if it holds none."""
    try:
        known = json.loads((out / FACTS).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    known["openmetrics"] = out / OPENMETRICS
    known["prometheus_text"] = out / PROMETHEUS_TEXT
    history = History(**known)
    if history.openmetrics.is_file() and history.prometheus_text.is_file():
        return history
    return None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options that choose what history to generate (shared with the advisor bench)."""
    parser.add_argument("--scenario", default="builtin:large", help="simulator scenario")
    parser.add_argument("--duration", default="1h", help="span of history (PromQL duration)")
    parser.add_argument(
        "--step",
        default="60s",
        help="time between scrape rounds (default 60s: the exporter's ServiceMonitor scrapes "
        "every 15s, but at 8-10 s per 1,000-node round a 15s step, 241 rounds, takes 35-40 "
        "minutes to generate; 60s gives 61 samples per series, enough for every policy)",
    )
    parser.add_argument(
        "--end", type=float, help="Unix time of the last round (default: now, whole minutes)"
    )


def from_args(
    args: argparse.Namespace, out: Path, progress: Callable[[str], None] | None = None
) -> History:
    """:func:`generate` as ``args`` ask (:class:`ConfigError` for a bad duration or step)."""
    end = args.end if args.end is not None else float(int(time.time()) // 60 * 60)
    return generate(
        args.scenario,
        out,
        duration=parse_duration(args.duration),
        step=parse_duration(args.step),
        end=end,
        progress=progress,
    )


def main() -> int:
    """Write the history files into ``--out`` and print what was written."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    add_arguments(parser)
    parser.add_argument("--out", type=Path, required=True, help="directory for the files")
    args = parser.parse_args()
    try:
        history = from_args(args, args.out)
    except ConfigError as exc:
        print(f"advisor_history: error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(facts(history)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
