"""The table of dashboards: each one's ``build`` function, in the order the generator writes
them. Importing this module loads grafana-foundation-sdk (the ``grafana`` extra), so the
package imports it only when dashboards are built.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from toposcope.dashboards.grafana import (
    advisor,
    cluster_overview,
    fabric,
    node_detail,
    slurm_queue,
    workload_locality,
)

#: One builder per dashboard; each returns the dashboard's JSON model.
BUILDERS: tuple[Callable[[], dict[str, Any]], ...] = (
    cluster_overview.build,
    node_detail.build,
    workload_locality.build,
    advisor.build,
    slurm_queue.build,
    fabric.build,
)
