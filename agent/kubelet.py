"""How the agent names Kubernetes workloads: through the kubelet where it can, else by path.

With the kubelet's pod-resources socket (``--kubelet.pod-resources-socket``, or the default
socket where it exists) the agent names pods as the exporter does, with the
:class:`~toposcope.host.podresources.mapper.KubeletMapper` (container runtime
state and the kubelet's answer), so its answers and refusals say ``pod ns/name container
c``. Without it, it says so once and names cgroups by their path alone
(:class:`~toposcope.host.workload_identity.PathMapper`: pod UID and container
id). Either way a workload's name is the exporter's ``workload`` label, and its QoS class
comes from its cgroup path.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from toposcope.config import HostPaths
from toposcope.host.podresources.mapper import KubeletMapper
from toposcope.host.podresources.runtime_state import RuntimeState
from toposcope.host.podresources.source import KubeletSource
from toposcope.host.workload_identity import PathMapper, WorkloadMapper

LOG = logging.getLogger("toposcope.agent")


def workload_mapper(
    paths: HostPaths, kubelet: KubeletSource, runtime_state: Sequence[str] = ()
) -> WorkloadMapper:
    """The kubelet-backed mapper when ``kubelet`` is enabled, else the path mapper (said once)."""
    if not kubelet.enabled:
        LOG.info(
            "not asking the kubelet (%s): pods are named by their cgroup paths "
            "(pod UID and container id)",
            kubelet.reason,
        )
        return PathMapper()
    return KubeletMapper(paths, RuntimeState.under(paths.rootfs, runtime_state), kubelet)
