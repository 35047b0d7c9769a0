"""This node's DRA devices for the exporter, from its ResourceSlices (opt-in, stale-tolerant).

The kubelet names a container's DRA devices by driver, pool and device name only
(:class:`~toposcope.host.podresources.records.ClaimedDevice`); which GPU, which PCIe root and
which NUMA node each is comes from the node's ResourceSlices
(:mod:`toposcope.kubeapi.resourceslices`). With ``--kubernetes.dra-slices`` the exporter
reads them from the API server at most once every ``refresh`` seconds, and sooner when the
kubelet names a device it has not seen (a driver that published again); never more often
than every ``min_interval`` seconds. When the API server does not answer, the last devices
are kept (said once, and once more when it answers again). Without the option every DRA
device is still published under its driver, pool and device name, without locality.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping

from toposcope.config import PodOwnerSettings
from toposcope.errors import ConfigError
from toposcope.kubeapi.resourceslices import SliceDevice, read_node_devices

LOG = logging.getLogger("toposcope.exporter.kubernetes")

Devices = Mapping[tuple[str, str, str], SliceDevice]
#: seconds between two reads at least, even when the kubelet names unknown devices
MIN_INTERVAL = 10.0


class SliceDirectory:
    """The node's published devices, read through ``fetch`` (see the module docstring)."""

    def __init__(
        self,
        fetch: Callable[[], Devices],
        refresh: float = 60.0,
        *,
        min_interval: float = MIN_INTERVAL,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._fetch = fetch
        self._refresh = refresh
        self._min_interval = min(min_interval, refresh)
        self._clock = clock
        self._lock = threading.Lock()
        self._devices: Devices = {}
        self._read_at: float | None = None
        self._failing = False

    def devices(self, wanted: Iterable[tuple[str, str, str]] = ()) -> Devices:
        """The devices, read again when due or when one of ``wanted`` is unknown."""
        with self._lock:
            now = self._clock()
            age = None if self._read_at is None else now - self._read_at
            missing = any(key not in self._devices for key in wanted)
            if age is None or age >= self._refresh or (missing and age >= self._min_interval):
                self._read_at = now
                self._read()
            return self._devices

    def _read(self) -> None:
        try:
            self._devices = dict(self._fetch())
        except ConfigError as exc:
            if not self._failing:
                LOG.warning("ResourceSlices unreadable (%s): keeping the last devices", exc)
                self._failing = True
            return
        if self._failing:
            LOG.info("ResourceSlices readable again")
            self._failing = False


def open_slice_directory(settings: PodOwnerSettings) -> SliceDirectory:
    """A directory reading ``settings.node_name``'s slices through its kubeconfig (or the
    pod's service account); a :class:`ConfigError` when neither is usable.
    """
    from toposcope.kubeapi.client import connect  # noqa: PLC0415

    api = connect(settings.kubeconfig)
    node = settings.node_name
    return SliceDirectory(lambda: read_node_devices(api, node), settings.refresh_seconds)


__all__ = ["MIN_INTERVAL", "SliceDirectory", "open_slice_directory"]
