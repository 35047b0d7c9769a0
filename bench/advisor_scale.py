"""The advisor at scale: 1,000 nodes x 4,000 workloads x 1 h of history in one analysis.

The history comes from the simulator (``advisor_history.py``: every node scraped through the
exporter's collectors once per ``--step``, the simulated clock moving between rounds) and is
loaded into real backends (``advisor_backends.py``): a Prometheus whose TSDB
``promtool tsdb create-blocks-from openmetrics`` backfilled, and a VictoriaMetrics through
its import API. ``--backend standin`` adds the older stand-in API with pre-computed answers
(``advisor_standin.py``), which leaves out the TSDB's own time.

Against each backend, each in a fresh interpreter (a subprocess whose peak RSS is its own):

* the **analysis**: the advisor's queries over HTTP (``queries``: request, the backend's
  evaluation, transfer, JSON decoding), building the model (``model``) and every policy with
  conflict resolution (``policies``), the code behind ``toposcope advise``; the advisor's own
  analysis is ``model + policies``;
* the **CLI** end to end, ``toposcope advise --prometheus URL --window 1h --at END --format
  json``: the same plus interpreter start-up, option parsing and rendering the report, its
  query time read from its own debug log.

``--repeat`` runs each several times and reports medians. Targets on this 2-core machine: the
advisor's own analysis <= 3 s, the CLI end to end <= 15 s, peak RSS <= 1 GB; a miss prints
MISSED (exit status 0: benchmarks print figures).
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import advisor_backends
import advisor_history
import advisor_standin

from toposcope.devtools.procs import MissingBinaryError
from toposcope.errors import ConfigError
from toposcope.waiting import NotReadyError

TARGET_ANALYSIS_S = 3.0
TARGET_END_TO_END_S = 15.0
TARGET_RSS_MB = 1024.0
#: the advisor loader's debug line with the run's total query time
QUERY_TIME = re.compile(r"\d+ queries to \S+ in ([0-9.]+) s")
RUN_TIMEOUT_S = 600.0


#: the end of both child programs: the process's own peak RSS, VmHWM of the program after
#: exec (``ru_maxrss`` would also count the benchmark's memory the child was forked from)
PEAK = """
import sys
with open("/proc/self/status") as status:
    peak = [line.split()[1] for line in status if line.startswith("VmHWM:")][0]
sys.stderr.write(f"peak_rss_kb {peak}\\n")
"""
_PEAK_LINE = re.compile(r"^peak_rss_kb (\d+)$", re.MULTILINE)
#: ``toposcope advise`` as ``python -m toposcope.cli`` runs it, then its peak RSS
CLI = (
    """
import sys
from toposcope.cli import main
code = main(sys.argv[1:])
"""
    + PEAK
    + "sys.exit(code)\n"
)


@dataclass(frozen=True)
class Measured:
    """One child process: its exit status, wall seconds, peak RSS and output."""

    returncode: int
    seconds: float
    rss_mb: float
    stdout: str
    stderr: str


def measure(argv: Sequence[str], workdir: Path) -> Measured:
    """Run ``argv`` (a program ending with :data:`PEAK`) for its wall time and peak RSS;
    output goes through files (reports are large).
    """
    out, err = workdir / "stdout", workdir / "stderr"
    with out.open("wb") as stdout, err.open("wb") as stderr:
        started = time.perf_counter()
        done = subprocess.run(
            argv, stdout=stdout, stderr=stderr, timeout=RUN_TIMEOUT_S, check=False
        )
        seconds = time.perf_counter() - started
    log = err.read_text(encoding="utf-8", errors="replace")
    peak = _PEAK_LINE.search(log)
    return Measured(
        done.returncode,
        seconds,
        int(peak.group(1)) / 1024 if peak else float("nan"),
        out.read_text(encoding="utf-8", errors="replace"),
        log,
    )


ANALYSIS = (
    """
import json, sys, time
from toposcope.advisor.loaders import PrometheusLoader, Window, load_all, queries
from toposcope.advisor.model_builder import build_model
from toposcope.advisor.policies import build
from toposcope.advisor.runner import advise
at = float(sys.argv[3]) if sys.argv[3] else None
window = Window.parse(sys.argv[2], end=at)
started = time.perf_counter()
data = load_all(PrometheusLoader(sys.argv[1], timeout=120), window, queries())
loaded = time.perf_counter()
model = build_model(data)
built = time.perf_counter()
report = advise(model, build())
done = time.perf_counter()
slowest = sorted(data.timings.items(), key=lambda kv: -kv[1])[:3]
print(json.dumps({"queries": loaded - started, "model": built - loaded,
                  "policies": done - built, "recommendations": len(report.recommendations),
                  "workloads": len(model.workloads), "slowest": slowest}))
"""
    + PEAK
)


def run_analysis(url: str, window: str, at: float | None, workdir: Path) -> dict[str, Any]:
    """The analysis alone in a fresh interpreter (no option parsing, no rendering)."""
    argv = [sys.executable, "-c", ANALYSIS, url, window, "" if at is None else f"{at:.0f}"]
    done = measure(argv, workdir)
    if done.returncode != 0:
        raise RuntimeError(f"the analysis exited {done.returncode}: {done.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(done.stdout)
    result["rss_mb"] = done.rss_mb
    return result


def _query_seconds(log: str) -> float:
    """The total query time the advisor's debug log reports (JSON lines)."""
    for line in log.splitlines():
        if line.startswith("{") and " queries to " in line:
            found = QUERY_TIME.fullmatch(str(json.loads(line)["msg"]))
            if found:
                return float(found.group(1))
    raise RuntimeError("the advisor's debug log has no query time")


def run_advisor(url: str, window: str, at: float | None, workdir: Path) -> dict[str, Any]:
    """One ``toposcope advise`` run end to end: seconds, query seconds, peak RSS, report size."""
    argv = [
        *(sys.executable, "-c", CLI, "advise", "--prometheus", url),
        *("--window", window, "--format", "json", "--timeout", "120"),
        *(("--at", f"{at:.0f}") if at is not None else ()),
        *("--log.level", "debug", "--log.format", "json"),
    ]
    done = measure(argv, workdir)
    if done.returncode != 0:
        raise RuntimeError(f"toposcope advise exited {done.returncode}: {done.stderr[-2000:]}")
    report = json.loads(done.stdout)
    return {
        "seconds": done.seconds,
        "queries": _query_seconds(done.stderr),
        "policies": float(report["run"]["duration_seconds"]),
        "rss_mb": done.rss_mb,
        "recommendations": len(report["recommendations"]),
    }


def time_backend(
    url: str, window: str, at: float | None, repeat: int, workdir: Path
) -> dict[str, Any]:
    """Medians of ``repeat`` analyses and ``repeat`` CLI runs against ``url``, and the targets."""
    analyses = [run_analysis(url, window, at, workdir) for _ in range(repeat)]
    runs = [run_advisor(url, window, at, workdir) for _ in range(repeat)]
    own = statistics.median(a["model"] + a["policies"] for a in analyses)
    end_to_end = statistics.median(r["seconds"] for r in runs)
    peak = max(*(a["rss_mb"] for a in analyses), *(r["rss_mb"] for r in runs))
    return {
        "analysis_queries_seconds": round(statistics.median(a["queries"] for a in analyses), 2),
        "analysis_model_seconds": round(statistics.median(a["model"] for a in analyses), 2),
        "analysis_policies_seconds": round(statistics.median(a["policies"] for a in analyses), 2),
        "analysis_own_seconds": round(own, 2),
        "slowest_queries": [[n, round(s, 2)] for n, s in analyses[len(analyses) // 2]["slowest"]],
        "cli_seconds": round(end_to_end, 2),
        "cli_seconds_all": [round(r["seconds"], 2) for r in runs],
        "cli_queries_seconds": round(statistics.median(r["queries"] for r in runs), 2),
        "cli_rest_seconds": round(statistics.median(r["seconds"] - r["queries"] for r in runs), 2),
        "peak_rss_mb": round(peak, 1),
        "workloads_in_model": analyses[0]["workloads"],
        "recommendations": runs[0]["recommendations"],
        "met": {
            "analysis": own <= TARGET_ANALYSIS_S,
            "end_to_end": end_to_end <= TARGET_END_TO_END_S,
            "rss": peak <= TARGET_RSS_MB,
        },
    }


@contextmanager
def history_in(args: argparse.Namespace) -> Iterator[advisor_history.History]:
    """The history to load: generated into ``--history-dir`` (kept, and reused when it holds
    one already) or into a temporary directory removed afterwards.
    """
    progress = None if args.json else (lambda line: print(line, file=sys.stderr, flush=True))
    if args.history_dir is not None:
        kept = advisor_history.read_history(args.history_dir)
        yield kept or advisor_history.from_args(args, args.history_dir, progress)
        return
    with tempfile.TemporaryDirectory(prefix="toposcope-advisor-history-") as directory:
        yield advisor_history.from_args(args, Path(directory), progress)


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Every backend asked for, timed; the history's figures when a real backend ran."""
    window, repeat = args.duration, max(1, args.repeat)
    result: dict[str, Any] = {"backends": {}}
    with tempfile.TemporaryDirectory(prefix="toposcope-advisor-scale-") as scratch:
        workdir = Path(scratch)
        if "standin" in args.backend:
            with advisor_standin.serving(args.scenario) as (url, facts):
                timed = time_backend(url, "1h", None, repeat, workdir)
                result["backends"]["standin"] = facts | timed
        real = [b for b in args.backend if b != "standin"]
        if real:
            with history_in(args) as history:
                result["history"] = advisor_history.facts(history)
                for name in real:
                    with advisor_backends.serving(name, history, workdir) as loaded:
                        timed = time_backend(loaded.url, window, history.end, repeat, workdir)
                        loading = {"load_seconds": round(loaded.load_seconds, 1)}
                        result["backends"][name] = loading | timed
    return result


def main() -> int:
    """Parse options, build the history, time the advisor against each backend, print."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    advisor_history.add_arguments(parser)
    parser.add_argument(
        "--backend",
        action="append",
        choices=["standin", *advisor_backends.BACKENDS],
        help="where the advisor reads (repeatable; default: prometheus and victoriametrics)",
    )
    parser.add_argument(
        "--history-dir", type=Path, help="keep the generated history here (reused if present)"
    )
    parser.add_argument("--repeat", type=int, default=3, help="runs of each (median reported)")
    parser.add_argument("--json", action="store_true", help="print JSON only")
    args = parser.parse_args()
    args.backend = args.backend or list(advisor_backends.BACKENDS)
    try:
        result = run(args)
    except (ConfigError, MissingBinaryError, NotReadyError) as exc:
        print(f"advisor_scale: error: {exc}", file=sys.stderr)
        return 2
    except subprocess.CalledProcessError as exc:
        print(f"advisor_scale: error: {exc}: {exc.stderr!r:.2000}", file=sys.stderr)
        return 2
    result["targets"] = {
        "analysis_own_seconds": TARGET_ANALYSIS_S,
        "cli_seconds": TARGET_END_TO_END_S,
        "peak_rss_mb": TARGET_RSS_MB,
    }
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    for key, value in result.get("history", {}).items():
        print(f"history {key:28} {value}")
    for name, figures in result["backends"].items():
        for key, value in figures.items():
            if key != "met":
                print(f"{name:15} {key:28} {value}")
        for target, met in figures["met"].items():
            print(f"{name:15} {target:28} {'met' if met else 'MISSED'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
