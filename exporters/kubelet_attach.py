"""Wires the kubelet and the runtime state into the exporter's collector context.

:func:`attach_kubelet` gives a context its :class:`KubeletSource` once (the command line
calls it before building the collectors, the ``kubelet`` collector when built alone);
:func:`workload_mapper` is the workloads collector's mapper: Kubernetes names from the
runtime state where it is readable and from the kubelet where it answers, cgroup
attribution everywhere else. Neither imports grpcio.
"""

from __future__ import annotations

from toposcope.exporters.context import CollectorContext
from toposcope.host.podresources.mapper import KubeletMapper
from toposcope.host.podresources.runtime_state import RuntimeState
from toposcope.host.podresources.source import KubeletSource, open_kubelet_source


def attach_kubelet(ctx: CollectorContext) -> KubeletSource:
    """The context's kubelet source, opened from ``ctx.config`` on the first call."""
    if ctx.kubelet is None:
        ctx.kubelet = open_kubelet_source(ctx.config.pod_resources_socket)
    return ctx.kubelet


def close_kubelet(ctx: CollectorContext) -> None:
    """Close the connection to the kubelet, if there is one (exporter shutdown)."""
    if ctx.kubelet is not None:
        ctx.kubelet.close()


def workload_mapper(ctx: CollectorContext) -> KubeletMapper:
    """The workloads collector's mapper for this context (see the module docstring).

    Uses the kubelet only when the context has been attached to one, so that building the
    workloads collector alone (tests, the agent's readers) never opens a socket.
    """
    config = ctx.config
    runtime = RuntimeState.under(config.paths.rootfs, config.runtime_state)
    kubelet = ctx.kubelet if ctx.kubelet is not None and ctx.kubelet.enabled else None
    return KubeletMapper(config.paths, runtime, kubelet)
