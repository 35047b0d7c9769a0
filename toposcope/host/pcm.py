"""Inter-socket link traffic from Intel PCM's ``pcm-sensor-server``, for hosts where PCM
already owns the uncore counters.

:class:`PcmLinkTraffic` reads the server's ``/metrics`` endpoint (Prometheus text) and turns
its per-link incoming data counters into bytes between packages, like the perf source.
"""

from __future__ import annotations

import http.client
import logging
import re
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence

from prometheus_client.parser import text_string_to_metric_families

from toposcope.errors import SourceError
from toposcope.host.uncore_pmus import link_peer

LOG = logging.getLogger("toposcope.host.perf_uncore")

# --------------------------------------------------------------------------- Intel PCM

_PCM_INCOMING_PREFIX = "Incoming_Data_Traffic_On_Link_"
_PCM_INCOMING_RE = re.compile(r"^Incoming_Data_Traffic_On_Link_(\d+)$")


def parse_pcm_incoming(text: str) -> dict[tuple[int, int], float]:
    """``{(socket, link): bytes}`` from pcm-sensor-server's Prometheus text.

    PCM prints, per socket and UPI/QPI link, ``Incoming_Data_Traffic_On_Link_<N>{aggregate=
    "system",source="uncore",socket="<S>"} <bytes>``: data bytes received by socket S on
    link N since the daemon started (``getIncomingQPILinkBytes``: 64 B per received data
    packet, from the ``RxL_FLITS`` data-flit counters). Only those lines are handed to the
    parser, so PCM's many other series (some with names the text format does not allow)
    cannot break it.
    """
    lines = [line for line in text.splitlines() if line.startswith(_PCM_INCOMING_PREFIX)]
    result: dict[tuple[int, int], float] = {}
    if not lines:
        return result
    for family in text_string_to_metric_families("\n".join(lines) + "\n"):
        for sample in family.samples:
            match = _PCM_INCOMING_RE.match(sample.name)
            socket = sample.labels.get("socket", "")
            if match is None or not socket.isdigit():
                continue
            key = (int(socket), int(match.group(1)))
            result[key] = result.get(key, 0.0) + float(sample.value)
    return result


def pcm_metrics_url(url: str) -> str:
    """The ``/metrics`` URL of a pcm-sensor-server given as ``http://host:port`` or in full."""
    parts = urllib.parse.urlsplit(url)
    if parts.path in ("", "/"):
        parts = parts._replace(path="/metrics")
    return urllib.parse.urlunsplit(parts)


class PcmClient:
    """Fetches pcm-sensor-server's Prometheus text (``GET /metrics``, 2 s timeout)."""

    def __init__(self, url: str, timeout: float = 2.0) -> None:
        self.url = pcm_metrics_url(url)
        self.timeout = timeout

    def fetch(self) -> str:
        """The endpoint's body; ``SourceError`` names the URL when it cannot be read."""
        try:
            with urllib.request.urlopen(self.url, timeout=self.timeout) as response:
                body: bytes = response.read()
        except (OSError, http.client.HTTPException, ValueError) as exc:
            raise SourceError(f"reading {self.url}: {exc}") from exc
        return body.decode("utf-8", errors="replace")


class PcmLinkTraffic:
    """Bytes between packages from PCM's per-link incoming data traffic.

    Bytes received by socket S on link N are attributed to ``(peer, S)``: sent by the
    package at the far end of link N. The far end comes from the kernel's UPI topology
    files (``upi_links``: uncore_upi link number -> die -> (link, die); PCM numbers links
    like the kernel) or, on two-package machines, is the other package. PCM's socket ids
    are taken to be the kernel's package ids.
    """

    name = "pcm"
    measured = True

    def __init__(
        self, client: PcmClient, upi_links: Mapping[int, Mapping[int, tuple[int, int]]]
    ) -> None:
        self._client = client
        self._upi_links = upi_links
        self._skipped: set[tuple[int, int]] = set()

    def read(self, packages: Sequence[int]) -> dict[tuple[int, int], float]:
        """``{(package, peer_package): bytes}`` sent from package to peer since PCM started."""
        incoming = parse_pcm_incoming(self._client.fetch())
        if not incoming:
            raise SourceError(f"{self._client.url} has no Incoming_Data_Traffic_On_Link_* series")
        totals: dict[tuple[int, int], float] = {}
        for (socket, link), value in sorted(incoming.items()):
            links = self._upi_links.get(link, {})
            sender = link_peer("upi", links, socket, packages)
            if sender is None:
                if (socket, link) not in self._skipped:
                    self._skipped.add((socket, link))
                    LOG.warning(
                        "pcm: cannot tell where link %d of socket %d leads; skipped", link, socket
                    )
                continue
            key = (sender, socket)
            totals[key] = totals.get(key, 0.0) + value
        return totals
