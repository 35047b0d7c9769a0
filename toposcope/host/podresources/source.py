"""The exporter's link to the kubelet: one pod-resources answer per scrape, shared.

:func:`open_kubelet_source` decides once, at start-up, whether to talk to the kubelet: when
``--kubelet.pod-resources-socket`` is given, or the default socket exists. Only then does it
import the gRPC client (the ``kubernetes`` extra); without the extra it says once how to
install it and the exporter goes on with cgroup attribution alone.

:class:`KubeletSource` asks the kubelet at most once every ``max_age`` seconds (one scrape
may ask from the workloads mapper and the ``kubelet`` collector; they share the answer).
When the kubelet cannot be asked, it says so once, answers ``None`` (workloads keep their
cgroup attribution) and asks again on the next scrape; it says so once more when the
kubelet is back.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from toposcope.errors import ConfigError
from toposcope.host.podresources.records import PodResources

if TYPE_CHECKING:
    from toposcope.host.podresources.client import PodResourcesClient

LOG = logging.getLogger("toposcope.exporter.kubernetes")

#: The kubelet's socket; the DaemonSets mount its directory at the same path.
DEFAULT_SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"
#: Seconds an answer is reused: shorter than any scrape interval, longer than one scrape.
MAX_AGE = 5.0


class KubeletSource:
    """The kubelet's latest answer, or why there is none (see the module docstring).

    ``client`` is ``None`` when the exporter does not talk to the kubelet; ``reason`` then
    says why. Thread-safe.
    """

    def __init__(
        self,
        client: PodResourcesClient | None,
        reason: str = "",
        *,
        max_age: float = MAX_AGE,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client = client
        self.reason = reason
        self.max_age = max_age
        self._clock = clock
        self._lock = threading.Lock()
        self._answer: PodResources | None = None
        self._asked_at: float | None = None
        self._failing = False

    @property
    def enabled(self) -> bool:
        """Whether the exporter talks to a kubelet at all."""
        return self.client is not None

    def answer(self) -> PodResources | None:
        """The kubelet's answer, at most ``max_age`` seconds old; ``None`` when unavailable."""
        if self.client is None:
            return None
        with self._lock:
            now = self._clock()
            if self._asked_at is not None and now - self._asked_at < self.max_age:
                return self._answer
            self._asked_at = now
            self._answer = self._ask(self.client)
            return self._answer

    def _ask(self, client: PodResourcesClient) -> PodResources | None:
        from toposcope.host.podresources.client import (  # noqa: PLC0415
            KubeletUnavailable,
        )

        try:
            answer = client.read()
        except KubeletUnavailable as exc:
            self.reason = str(exc)
            if not self._failing:
                LOG.warning(
                    "kubelet pod-resources unavailable (%s): workloads keep their cgroup "
                    "attribution; asking again on each scrape",
                    exc,
                )
                self._failing = True
            return None
        if self._failing:
            LOG.info("kubelet pod-resources at %s answers again", client.socket)
            self._failing = False
        self.reason = ""
        return answer

    def close(self) -> None:
        """Close the connection to the kubelet."""
        if self.client is not None:
            self.client.close()


def open_kubelet_source(socket: str | None, *, max_age: float = MAX_AGE) -> KubeletSource:
    """The kubelet source for ``--kubelet.pod-resources-socket`` (``None``: the default).

    Raises :class:`ConfigError` when a given socket's directory does not exist (a typo or a
    missing mount; the socket itself may come and go with the kubelet).
    """
    path = socket if socket is not None else DEFAULT_SOCKET
    if socket is None and not Path(path).exists():
        return KubeletSource(None, f"no kubelet socket at {path}")
    if socket is not None and not Path(path).parent.is_dir():
        raise ConfigError(
            f"--kubelet.pod-resources-socket {path}: directory {Path(path).parent} does not "
            "exist (mount the kubelet's pod-resources directory)"
        )
    try:
        from toposcope.host.podresources.client import (  # noqa: PLC0415
            PodResourcesClient,
        )
    except ImportError as exc:
        reason = (
            f"the kubelet socket {path} is there but the 'kubernetes' extra is not installed "
            f"({exc.name or exc}): pip install 'toposcope[kubernetes]' for pod, namespace and "
            "container names and the kubelet's allocations"
        )
        LOG.warning("%s", reason)
        return KubeletSource(None, reason)
    LOG.info("reading the kubelet's pod resources at %s", path)
    return KubeletSource(PodResourcesClient(path), max_age=max_age)
