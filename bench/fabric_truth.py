"""The fabric trace replay's judge: how much slower a gang job runs for the fabric levels it
spans. This is the bench's truth, kept apart from the advisor's prior
(:data:`toposcope.advisor.fabric_wait.LEVEL_SLOWDOWN_PRIOR`, 0.125 per level), which the
``toposcope`` policy decides with and which is deliberately milder than this model.

A data-parallel job's step is compute plus a ring all-reduce over its nodes; a ring runs at
the bandwidth of its slowest hop. Inside one leaf every hop is a NIC port on a non-blocking
switch. Once the ring leaves the leaf, its hops share the leaf's uplinks, tapered by the
leaf-to-spine oversubscription; once it leaves the pod, the spine's uplinks taper it again.
With ``c`` the share of a step the collectives take at full NIC bandwidth, a job whose
nodes span level ``L`` runs ``1 + c x (taper(L) - 1)`` times as long as in one leaf, where
``taper`` is the product of the oversubscriptions crossed. Defaults:

* :data:`COMM_SHARE` 0.3: an assumption at the communication-heavy end of what published
  scaling efficiencies imply (Horovod's README reports 90 % scaling efficiency for
  Inception V3 and ResNet-101 and 68 % for VGG-16 on 512 GPUs over 25 Gb/s RoCE: 10 to 32 % of
  a step is exposed communication); the issue's anchor (a 2-GPU job 40 % to 5x slower across nodes)
  is the same effect through slower links;
* :data:`LEAF_TAPER` 2.0 and :data:`SPINE_TAPER` 2.0: a 2:1 oversubscribed leaf-to-spine and
  spine-to-core tier, the common taper of cost-optimised clusters (rail-optimised AI
  fabrics are often built 1:1, where spanning costs little and the bench shows no gap).

So a job over two leaves of one pod runs 1.3x, over two pods 1.9x. The model charges the
worst case of a tapered link (the other jobs keep the uplinks busy) and ignores contention
inside a leaf; a job's *fabric slowdown* is its factor over the factor of the tightest
level it could have had (one leaf for a job that one leaf holds), minus 1.
"""

from __future__ import annotations

from dataclasses import dataclass

COMM_SHARE = 0.3
LEAF_TAPER = 2.0
SPINE_TAPER = 2.0


@dataclass(frozen=True)
class SlowdownModel:
    """The judge's model (see the module docstring); levels count as the cell tree's do:
    0 node, 1 leaf, 2 spine, 3 core and above.
    """

    comm_share: float = COMM_SHARE
    leaf_taper: float = LEAF_TAPER
    spine_taper: float = SPINE_TAPER

    def factor(self, level: int) -> float:
        """The run-time factor of a job whose nodes span ``level``."""
        taper = 1.0
        if level >= 2:
            taper *= self.leaf_taper
        if level >= 3:
            taper *= self.spine_taper
        return 1.0 + self.comm_share * (taper - 1.0)

    def slowdown(self, level: int, tightest: int) -> float:
        """The fabric slowdown of spanning ``level`` where ``tightest`` was possible."""
        return self.factor(level) / self.factor(min(level, tightest)) - 1.0
