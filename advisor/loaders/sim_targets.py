"""The scrape targets of a running simulator: every simulated node, from its own list.

``toposcope advise --sim http://127.0.0.1:9850`` reads the simulator's ``/targets.json``
(the Prometheus file_sd list it serves, one entry per node with a ``node`` label, see
:mod:`toposcope.sim.server`) and scrapes each node at ``/nodes/<name>/metrics`` of the same
URL, as ``--scrape NAME=URL`` would, one flag per node. Only the node names are taken from
the answer: the metrics URL is built from the ``--sim`` URL, never from the addresses the
simulator advertises, so a simulator listening on ``0.0.0.0`` or behind a port forward is
reached where the user reached it. A name that is not a host name is refused as
``--scrape`` refuses it (:func:`~toposcope.identity.names.check_node_name`), and the targets
are checked like ``--scrape`` targets (:func:`~.scrape.check_targets`).

The simulator's own ``/metrics`` is read too, as the scrape job ``toposcope-sim-cluster``:
it carries what no node publishes, the simulated scheduler's queue (pending jobs for
placement advice) and, with a scenario fabric, the fabric and each multi-node job's parts
(for ``fabric-placement`` and ``nic-affinity``), as a Prometheus scraping the simulator
would see them.
"""

from __future__ import annotations

import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from toposcope.advisor.errors import AdvisorConnectionError
from toposcope.advisor.loaders.scrape import ScrapeTarget, check_targets
from toposcope.errors import UsageError
from toposcope.identity.names import InvalidNameError, check_node_name
from toposcope.jsonrequest import json_request
from toposcope.serving.jsonbody import parse_json_body

#: where the simulator lists its nodes (file_sd JSON)
TARGETS_PATH = "/targets.json"
#: the simulator's cluster-wide page (queue, fabric, step counters) and its scrape job
CLUSTER_PATH = "/metrics"
CLUSTER_JOB = "toposcope-sim-cluster"
#: the largest node list read (a 10 000-node simulator's is about 1.2 MB)
MAX_LIST_BYTES = 8 * 1024 * 1024


def sim_base(url: str) -> str:
    """The simulator's base URL from ``--sim``: http(s), a host, no query; no trailing ``/``."""
    parsed = urllib.parse.urlsplit(url)
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise UsageError(f"--sim {url[:120]!r}: not an http(s) URL (e.g. http://127.0.0.1:9850)")
    if parsed.query or parsed.fragment:
        raise UsageError(f"--sim {url[:120]!r}: give the simulator's base URL, no query")
    return url.rstrip("/")


def _fetch(url: str, timeout: float) -> Any:
    try:
        with urllib.request.urlopen(json_request(url, "GET"), timeout=timeout) as response:
            raw: bytes = response.read(MAX_LIST_BYTES + 1)
    except urllib.error.HTTPError as exc:
        raise AdvisorConnectionError(
            f"--sim: {url}: HTTP {exc.code} (is this a toposcope simulator?)"
        ) from exc
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        raise AdvisorConnectionError(f"--sim: {url}: {reason}") from exc
    if len(raw) > MAX_LIST_BYTES:
        raise AdvisorConnectionError(f"--sim: {url}: node list over {MAX_LIST_BYTES} bytes")
    try:
        return parse_json_body(raw)
    except ValueError as exc:
        raise AdvisorConnectionError(f"--sim: {url}: not a JSON node list: {exc}") from exc


def node_names(entries: Any, url: str) -> list[str]:
    """The ``node`` labels of file_sd ``entries``, in order, once each (checked as host names)."""
    if not isinstance(entries, list):
        raise AdvisorConnectionError(f"--sim: {url}: not a file_sd list of targets")
    names: list[str] = []
    for entry in entries:
        labels = entry.get("labels") if isinstance(entry, dict) else None
        name = labels.get("node") if isinstance(labels, dict) else None
        if not isinstance(name, str):
            raise AdvisorConnectionError(f"--sim: {url}: an entry has no node label")
        try:
            check_node_name(name)
        except InvalidNameError as exc:
            raise AdvisorConnectionError(f"--sim: {url}: node {name[:80]!r}: {exc}") from None
        if name not in names:
            names.append(name)
    if not names:
        raise AdvisorConnectionError(f"--sim: {url}: the simulator lists no node")
    return names


def sim_targets(url: str, *, timeout: float = 10.0) -> list[ScrapeTarget]:
    """One scrape target per node the simulator at ``url`` lists, named as it names them,
    and one of the simulator's cluster-wide page (job ``toposcope-sim-cluster``).
    """
    base = sim_base(url)
    listed = base + TARGETS_PATH
    names = node_names(_fetch(listed, timeout), listed)
    targets = [
        ScrapeTarget(f"{base}/nodes/{urllib.parse.quote(name, safe='')}/metrics", name)
        for name in names
    ]
    targets.append(ScrapeTarget(base + CLUSTER_PATH, None, CLUSTER_JOB))
    check_targets(targets)
    return targets
