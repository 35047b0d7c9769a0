"""numa-pinning's price of a pin from the workload's measured memory traffic (resctrl MBM,
:mod:`~toposcope.advisor.numa_share`): pair by pair from the node's measured memory
bandwidths where the operator gave them (``--memory-bandwidth``), else its remote share times
``remote_cost`` scaled by distance.
"""

from __future__ import annotations

from toposcope.advisor.locality import distance_penalty, remote_share
from toposcope.advisor.model import NodeModel, WorkloadModel
from toposcope.advisor.numa_share import (
    MAX_SAVED,
    MatrixPricing,
    MeasuredMemoryShare,
    matrix_cost,
)
from toposcope.advisor.policies.pin_capacity import PinCandidate
from toposcope.advisor.policies.pinning_settings import NumaPinningSettings


def measured_candidate(
    node: NodeModel,
    workload: WorkloadModel,
    targets: list[int],
    measured: MeasuredMemoryShare,
    s: NumaPinningSettings,
) -> PinCandidate:
    """The candidate priced by ``workload``'s measured memory-bound share (module
    docstring); its penalty per unit of remote share travels with it, so that a plan
    whose memory does not all fit is priced on the same basis.
    """
    cpu, memory = workload.cpu_shares(), workload.memory_shares()
    first = targets[0]
    remote = remote_share(cpu, memory, first)
    gpu_nodes = frozenset(
        g.numa_node
        for i in workload.gpus
        if (g := node.gpu(i)) is not None and g.numa_node is not None
    )
    pricing = MatrixPricing(measured.share, gpu_nodes, s.thread_spread)
    cost = matrix_cost(node, cpu, memory, gpu_nodes, s.thread_spread)
    pinned = matrix_cost(node, {first: 1.0}, {first: 1.0}, gpu_nodes, s.thread_spread)
    if cost is not None and pinned is not None and node.measured_memory is not None:
        cost -= pinned  # what stays once pinned (a target away from its GPUs)
        saved = min(MAX_SAVED, measured.share * cost)
        pages = "its pages against its GPUs' nodes, " if gpu_nodes else ""
        text = (
            f"{measured.text()} x remote cost {cost:.3f} (its threads and pages over the "
            f"pairs of NUMA nodes, {pages}its threads apart x thread_spread "
            f"{s.thread_spread:g}; local / remote - 1 measured in "
            f"{node.measured_memory.path}): saves {saved:.3f} of its step, gain "
            "saved / (1 - saved)"
        )
        return PinCandidate(
            saved / (1.0 - saved),
            workload,
            targets,
            workload.cores_used(),
            text,
            matrix=pricing,
        )
    per_unit = measured.share * s.remote_cost
    penalty = distance_penalty(node, cpu, memory, first, per_unit, s.reference_distance)
    saved = min(MAX_SAVED, remote * penalty)
    text = (
        f"remote share {remote:.3f} (1 - c*m on node {first}) x {measured.text()} x remote "
        f"cost {penalty / measured.share if measured.share > 0 else 0.0:.3f} "
        f"({s.remote_cost:g} at the node's farthest SLIT distance or reference_distance): "
        f"saves {saved:.3f} of its step, gain saved / (1 - saved)"
    )
    return PinCandidate(
        saved / (1.0 - saved), workload, targets, workload.cores_used(), text, penalty=per_unit
    )
