"""The exporter's GPU side for one ``--nvml`` setting, shared through the collector context.

``--nvml auto`` uses the real bindings when ``libnvidia-ml`` loads (and turns the GPU part
off with one info line when it does not), ``off`` turns it off, ``fake`` runs the shipped
DGX A100 description on the fake NVML, ``fake:NAME`` another shipped description and
``fake:FILE`` any description file. :func:`attach_gpu_source` builds the one
:class:`GpuSource` of a :class:`~toposcope.exporters.context.CollectorContext`; the ``gpu``
collector and the workloads collector (through ``ctx.gpu_processes``) then share its NVML
layer, and :func:`close_gpu_source` stops its threads and shuts NVML down.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from toposcope.errors import ConfigError, NoDataError
from toposcope.exporters.context import CollectorContext
from toposcope.host.nvml import NvmlNotReady, NvmlUnavailable
from toposcope.host.nvml.records import GpuActivity, GpuDevice, GpuProcess
from toposcope.topology.model import Topology
from toposcope.topology.nvml import merge_nvml_gpus

if TYPE_CHECKING:
    from toposcope.host.nvml import ActivityReader, NvmlDevices, PcieSampler, XidWatcher
    from toposcope.host.nvml.process_utilization import ProcessUtilizationReader

LOG = logging.getLogger("toposcope.exporter.nvml")

NVML_MODES_HELP = "auto, off, fake, fake:NAME (a shipped description) or fake:FILE"


def check_mode(mode: str) -> None:
    """Raise :class:`ConfigError` for an ``--nvml`` value that is none of the known forms."""
    if mode in ("auto", "off", "fake") or (mode.startswith("fake:") and len(mode) > 5):
        return
    raise ConfigError(f"--nvml must be {NVML_MODES_HELP}, not {mode!r}")


def nvml_library_missing() -> str | None:
    """Why the NVML library cannot be loaded here, or ``None`` when it can.

    Mirrors where the bindings look on Linux (``pynvml._LoadNvmlLibrary`` opens
    ``libnvidia-ml.so.1`` through the dynamic loader: ``LD_LIBRARY_PATH``, the loader cache,
    the system folders); elsewhere the bindings decide. Answering this first keeps the
    bindings and the NVML layer (2.9 MB resident) out of an exporter on a host without the
    NVIDIA driver.
    """
    if not sys.platform.startswith("linux"):
        return None
    # ctypes is needed only for this check, in auto mode
    import ctypes  # noqa: PLC0415

    try:
        ctypes.CDLL("libnvidia-ml.so.1")
    except OSError as exc:
        return f"NVML library not found ({exc})"
    return None


def open_backend(mode: str, clock: Callable[[], float] | None = None) -> Any:
    """The bindings module for ``auto``, a fake NVML for ``fake...``, ``None`` for ``off``.

    In ``auto`` mode the bindings are imported only here, once the library is known to load
    (:func:`nvml_library_missing` says why not otherwise, raised as :class:`NvmlUnavailable`).
    """
    check_mode(mode)
    if mode == "off":
        return None
    if mode == "auto":
        missing = nvml_library_missing()
        if missing is not None:
            raise NvmlUnavailable(missing)
        # the bindings and the NVML layer: 2.9 MB resident, paid only where NVML loads
        import pynvml  # noqa: PLC0415

        return pynvml
    # the fake NVML (its descriptions, fault plans and YAML reader: 0.7 MB resident) is
    # loaded only when asked for, so a serving exporter without it never holds it
    from toposcope.fake_nvml import load_fake_nvml  # noqa: PLC0415

    return load_fake_nvml(mode, clock=clock)


class GpuSource:
    """The shared NVML layer (or the reason there is none) and its background threads.

    Implements the context's ``GpuProcessSource`` and ``GpuActivitySource`` for the
    workloads collector. The threads (PCIe sampler, XID watcher) start with
    :meth:`start_background`, which the ``gpu`` collector calls, and stop with
    :meth:`close`. The activity reader (GPM samples and the byte counters integrated from
    rates) is made on the first :meth:`read_activity` and read by every scrape of the
    ``gpu`` collector.
    """

    def __init__(
        self,
        mode: str,
        devices: NvmlDevices | None,
        reason: str = "",
        *,
        pcie_period: float = 1.0,
        xid_wait_ms: int = 500,
    ) -> None:
        self.mode = mode
        self.devices = devices
        self.reason = reason
        self.pcie: PcieSampler | None = None
        self.xid: XidWatcher | None = None
        self.activity: ActivityReader | None = None
        self.process_utilization: ProcessUtilizationReader | None = None
        self._pcie_period = pcie_period
        self._xid_wait_ms = xid_wait_ms

    def require(self) -> NvmlDevices:
        """The NVML layer; :class:`NoDataError` when GPUs are off or NVML is unavailable."""
        if self.devices is None:
            raise NoDataError(self.reason or "NVML is off")
        return self.devices

    def gpu_processes(self) -> list[GpuProcess]:
        """Processes on every healthy GPU; empty without NVML."""
        if self.devices is None:
            return []
        return self.devices.gpu_processes()

    def gpu_process_utilization(self) -> dict[int, dict[int, float]]:
        """Each process's SM share of each GPU with new per-process samples; empty without
        NVML (:class:`~toposcope.host.nvml.process_utilization.ProcessUtilizationReader`,
        made on the first call).
        """
        if self.devices is None:
            return {}
        if self.process_utilization is None:
            # the reader needs the bindings, loaded already when there are devices
            from toposcope.host.nvml.process_utilization import (  # noqa: PLC0415
                ProcessUtilizationReader,
            )

            self.process_utilization = ProcessUtilizationReader(self.devices)
        return self.process_utilization.read()

    def read_activity(self, devices: Sequence[GpuDevice]) -> dict[int, GpuActivity]:
        """Read the throughput and activity of ``devices`` now (the ``gpu`` collector's scrape)."""
        if self.devices is None:
            return {}
        if self.activity is None:
            # the reader needs the bindings, loaded already when there are devices
            from toposcope.host.nvml import ActivityReader  # noqa: PLC0415

            self.activity = ActivityReader(self.devices)
        return self.activity.read(devices, self.pcie)

    def gpu_activity(self) -> dict[int, GpuActivity]:
        """The last reading of :meth:`read_activity` by GPU index; empty before the first."""
        return self.activity.latest() if self.activity is not None else {}

    def start_background(self) -> None:
        """Start the PCIe sampler and the XID watcher (once; nothing without NVML)."""
        if self.devices is None or self.pcie is not None:
            return
        # the threads need the bindings, loaded already when there are devices
        from toposcope.host.nvml import PcieSampler, XidWatcher  # noqa: PLC0415

        self.pcie = PcieSampler(self.devices, period=self._pcie_period)
        self.xid = XidWatcher(self.devices, wait_ms=self._xid_wait_ms)
        self.pcie.start()
        self.xid.start()

    def stop_background(self, timeout: float = 5.0) -> bool:
        """Stop the threads; ``False`` if one is still stuck inside an NVML call."""
        stopped = True
        for worker in (self.pcie, self.xid):
            if worker is not None:
                stopped = worker.stop(timeout) and stopped
        return stopped

    def close(self, timeout: float = 5.0) -> None:
        """Stop the threads, free the GPM samples and shut NVML down."""
        self.stop_background(timeout)
        if self.activity is not None:
            self.activity.close()
        if self.devices is not None:
            self.devices.close()


def open_gpu_source(
    mode: str,
    *,
    topology: Callable[[], Topology] | None = None,
    clock: Callable[[], float] | None = None,
    backend: Any = None,
    pcie_period: float = 1.0,
    xid_wait_ms: int = 500,
) -> GpuSource:
    """Build the GPU source for an ``--nvml`` setting and initialise NVML once.

    ``backend`` overrides the one ``mode`` names (tests pass a prepared fake). A malformed
    fake description raises :class:`ConfigError`; a missing library in ``auto`` mode gives
    a source without NVML and one info log line.
    """
    check_mode(mode)
    try:
        if backend is None:
            backend = open_backend(mode, clock=None)
    except NvmlUnavailable as exc:
        return _without_nvml(mode, exc)
    if backend is None:
        LOG.info("collector=gpu NVML off (--nvml off): no GPU metrics")
        return GpuSource(mode, None, "NVML is off (--nvml off)")
    # the NVML layer needs the bindings: loaded only once a backend exists
    from toposcope.host.nvml import NvmlDevices  # noqa: PLC0415

    devices = NvmlDevices(
        backend, topology=topology, clock=clock if clock is not None else time.monotonic
    )
    try:
        found = devices.ensure_ready()
    except NvmlUnavailable as exc:
        return _without_nvml(mode, exc)
    except NvmlNotReady as exc:
        LOG.warning("collector=gpu %s; will retry", exc)
        found = []
    source = GpuSource(mode, devices, pcie_period=pcie_period, xid_wait_ms=xid_wait_ms)
    if found:
        LOG.info("collector=gpu NVML (%s) sees %d GPU(s)", mode, len(found))
    return source


def _without_nvml(mode: str, exc: NvmlUnavailable) -> GpuSource:
    LOG.info("collector=gpu %s: no GPU metrics on this host", exc)
    return GpuSource(mode, None, str(exc))


def attach_gpu_source(ctx: CollectorContext) -> None:
    """Give ``ctx`` its GPU source per ``ctx.config.nvml`` (once) and its process source.

    Sets ``ctx.nvml`` (always, once attached) and ``ctx.gpu_processes`` (when NVML is
    usable), so that the ``gpu`` and workloads collectors share one NVML layer. Call it
    after building the context and before building the collectors.
    """
    if ctx.nvml is not None:
        return
    source = open_gpu_source(ctx.config.nvml, topology=ctx.topology.get)
    install_gpu_source(ctx, source)


def install_gpu_source(ctx: CollectorContext, source: GpuSource) -> None:
    """Put an already built source on ``ctx`` (tests build theirs with a prepared fake)."""
    ctx.nvml = source
    ctx.gpu_processes = source if source.devices is not None else None


def close_gpu_source(ctx: CollectorContext, timeout: float = 5.0) -> None:
    """Stop the GPU threads and shut NVML down (exporter shutdown, end of a test)."""
    if ctx.nvml is not None:
        ctx.nvml.close(timeout)


def merge_nvml_topology(
    topology: Topology, mode: str, clock: Callable[[], float] | None = None
) -> Topology:
    """``topology`` with NVML's GPUs and link matrix merged in (``toposcope topology``).

    In ``auto`` mode a host without NVML keeps its sysfs topology unchanged; with a fake
    description its GPUs are merged as if they were this host's.
    """
    try:
        backend = open_backend(mode, clock=clock)
    except NvmlUnavailable as exc:
        LOG.debug("NVML not used for the topology: %s", exc)
        return topology
    if backend is None:
        return topology
    # the NVML layer needs the bindings: loaded only once a backend exists
    from toposcope.host.nvml import NvmlDevices  # noqa: PLC0415

    devices = NvmlDevices(backend, topology=lambda: topology)
    try:
        gpus, links = devices.gpu_topology()
    except (NvmlUnavailable, NvmlNotReady) as exc:
        if mode == "auto":
            LOG.debug("NVML not used for the topology: %s", exc)
            return topology
        raise
    finally:
        devices.close()
    return merge_nvml_gpus(topology, gpus, links)
