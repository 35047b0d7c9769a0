"""Real PromQL backends holding a generated history, for the advisor benchmark.

* **Prometheus:** ``promtool tsdb create-blocks-from openmetrics`` turns the OpenMetrics file
  into TSDB blocks in the data directory of a real Prometheus (no scrape jobs, retention long
  enough for the history's end however old it is), which then serves the PromQL API.
* **VictoriaMetrics:** a real single-node VictoriaMetrics; the Prometheus-text file (with
  millisecond timestamps) is posted to ``/api/v1/import/prometheus`` in pieces of whole lines,
  then ``/internal/force_flush`` makes it searchable.

Both wait, with a deadline, until every node's samples answer a query at the history's end,
and say how long loading took.
"""

from __future__ import annotations

import json
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path

from advisor_history import History

from toposcope.devtools.procs import (
    PROMETHEUS,
    VICTORIA_METRICS,
    LocalServer,
    find_binary,
    http_get,
    instant_query,
    prometheus_config,
)
from toposcope.waiting import wait_until

#: how long a loaded server may take to answer for every node (opening 1,000 nodes' blocks)
READY_DEADLINE_S = 300.0
#: bytes per import request to VictoriaMetrics (cut at a line end)
IMPORT_PIECE = 32 << 20
BACKENDS = ("prometheus", "victoriametrics")


@dataclass(frozen=True)
class Loaded:
    """A backend serving the history: its URL and the seconds loading took."""

    name: str
    url: str
    load_seconds: float


def _samples_at_end(url: str, history: History) -> bool:
    """True when the backend answers every node's build info over the whole history."""
    window = f"{int(history.end - history.start) + 1}s"
    found = instant_query(
        url, f"count(count_over_time(toposcope_exporter_build_info[{window}]))", history.end
    )
    return bool(found) and int(float(found[0]["value"][1])) >= history.nodes


@contextmanager
def prometheus(history: History, workdir: Path) -> Iterator[Loaded]:
    """A real Prometheus on loopback whose TSDB was backfilled with ``history``."""
    server = LocalServer(
        PROMETHEUS,
        workdir,
        json.dumps(prometheus_config([])),
        ("--storage.tsdb.retention.time=100y",),
    )
    started = time.perf_counter()
    promtool = find_binary("promtool", "it comes with Prometheus (deploy/bootstrap.sh)")
    subprocess.run(
        [
            *(promtool, "tsdb", "create-blocks-from", "openmetrics"),
            *(str(history.openmetrics), str(workdir / f"{PROMETHEUS.name}-data")),
        ],
        check=True,
        capture_output=True,
    )
    with server.run(ready_deadline_s=READY_DEADLINE_S):
        wait_until(
            lambda: _samples_at_end(server.url, history),
            READY_DEADLINE_S,
            what="Prometheus answering for every node",
        )
        yield Loaded("prometheus", server.url, time.perf_counter() - started)


def _pieces(path: Path) -> Iterator[bytes]:
    """``path`` in pieces of about :data:`IMPORT_PIECE` bytes, each ending at a line end."""
    with path.open("rb") as source:
        rest = b""
        while block := source.read(IMPORT_PIECE):
            block = rest + block
            cut = block.rfind(b"\n") + 1
            rest = block[cut:]
            if cut:
                yield block[:cut]
        if rest:
            yield rest


@contextmanager
def victoriametrics(history: History, workdir: Path) -> Iterator[Loaded]:
    """A real VictoriaMetrics on loopback into which ``history`` was imported."""
    server = LocalServer(VICTORIA_METRICS, workdir, extra_args=("-retentionPeriod=100y",))
    with server.run():
        started = time.perf_counter()
        for piece in _pieces(history.prometheus_text):
            request = urllib.request.Request(
                f"{server.url}/api/v1/import/prometheus", data=piece, method="POST"
            )
            with urllib.request.urlopen(request, timeout=600) as answer:
                answer.read()
        http_get(f"{server.url}/internal/force_flush", timeout=120)
        wait_until(
            lambda: _samples_at_end(server.url, history),
            READY_DEADLINE_S,
            what="VictoriaMetrics answering for every node",
        )
        yield Loaded("victoriametrics", server.url, time.perf_counter() - started)


def serving(name: str, history: History, workdir: Path) -> AbstractContextManager[Loaded]:
    """The context manager of backend ``name`` (one of :data:`BACKENDS`)."""
    directory = workdir / name
    directory.mkdir(parents=True, exist_ok=True)
    if name == "prometheus":
        return prometheus(history, directory)
    return victoriametrics(history, directory)
