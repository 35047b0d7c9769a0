"""Moves that only change a job's worst link between PCIe paths of one socket, held back.

Going from ``NODE`` or ``PHB`` to ``PXB`` or ``PIX`` looks like a gain by the prior's link
prices (across switches 1.4 against 1.0), but the peer bandwidth through a host bridge is
within the spread of a switch's on many platforms: on some the switch is faster, on others
slower. job-migration (a plain move, a defragmentation or an exchange alike) makes such a move
a note instead of a recommendation unless ``move_between_pcie_tiers`` is set or both sets'
prices are measured (``--p2p-bandwidth``), which says on this machine which path is faster.
"""

from __future__ import annotations

from toposcope.advisor.gpu_sets import Placement
from toposcope.advisor.link_gain import MEASURED
from toposcope.advisor.model import WorkloadModel
from toposcope.advisor.policies.migration_settings import JobMigrationSettings
from toposcope.report.recommendation import Note
from toposcope.topology.model import LinkType

#: worst links of one socket's PCIe fabric: a move between them rests on an uncertain gap
PCIE_TIERS = frozenset({LinkType.PIX, LinkType.PXB, LinkType.PHB, LinkType.NODE})


def pcie_tier_move(current: Placement, best: Placement) -> bool:
    """Whether a move only changes the worst link between PCIe paths of one socket (for
    example ``NODE`` to ``PIX``): the peer bandwidth through a host bridge is within the
    spread of a switch's on many platforms (a switch is faster on some, slower on others),
    so the prior's 1.4 can come out as a loss.
    """
    return current.worst_link in PCIE_TIERS and best.worst_link in PCIE_TIERS


def tier_only(settings: JobMigrationSettings, current: Placement, target: Placement) -> bool:
    """Whether a move of a running job from ``current`` to ``target`` is held back as
    one between PCIe paths of a socket (a plain move and a defragmentation alike): not
    when ``move_between_pcie_tiers`` is set, nor when both sets' prices are measured
    (``--p2p-bandwidth``), which says on this machine which path is faster.
    """
    if settings.move_between_pcie_tiers or not pcie_tier_move(current, target):
        return False
    return not (current.price.source == MEASURED and target.price.source == MEASURED)


def tier_note(
    policy: str, job: WorkloadModel, current: Placement, target: Placement, how: str
) -> Note:
    """The note of ``policy`` that says why ``job`` is not moved (``how``: "moving to", or
    "freeing" for a defragmentation) from ``current`` to ``target``: a move between PCIe
    paths of a socket (:func:`tier_only`).
    """
    return Note(
        policy,
        job.key,
        f"{how} {target.node} GPUs {list(target.gpus)} only changes its worst link from "
        f"{current.worst_link} to {target.worst_link}, a gap that varies by platform and "
        "can be a loss; measure both pairs (--p2p-bandwidth) or set "
        "move_between_pcie_tiers to move it",
    )
