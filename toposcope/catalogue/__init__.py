"""The metric catalogue: one row per metric family toposcope publishes.

This table is the contract between the exporters (which build their families from it),
the alerting rules and dashboards (whose tests check every metric they name against it),
the advisor's loaders (which build PromQL from it) and ``docs/metrics.md`` (generated from
it by ``toposcope docs metrics``). Names follow the Prometheus naming rules: the
``toposcope_`` namespace, base units, ``_total`` for counters and ``_info`` for identity
series whose value is always 1.

The rows live in one module per part that publishes them (:mod:`.exporter_metrics`,
:mod:`.gpu_metrics`, :mod:`.advisor_metrics`, :mod:`.sim_metrics`,
:mod:`.daemon_metrics` for what every daemon says about itself, :mod:`.queue_metrics` for
schedulers' queues, :mod:`.slurm_gres_metrics` for the gres.conf check, :mod:`.fabric_metrics`
for NICs per workload and multi-node jobs on the fabric), in the order
``docs/metrics.md`` lists them; :mod:`.model` defines a row; :data:`GPU_KEYS` are the labels
every GPU series carries (dcgm-exporter's join keys).
"""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client import generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from toposcope.catalogue.advisor_metrics import ADVISOR_SPECS
from toposcope.catalogue.daemon_metrics import DAEMON_SPECS
from toposcope.catalogue.dra_metrics import DRA_SPECS
from toposcope.catalogue.exporter_metrics import HOST_SPECS, WORKLOAD_SPECS
from toposcope.catalogue.fabric_metrics import JOB_FABRIC_SPECS, NODE_FABRIC_SPECS
from toposcope.catalogue.gpu_metrics import GPU_KEYS, GPU_SPECS
from toposcope.catalogue.model import MetricSpec, MetricType
from toposcope.catalogue.queue_metrics import QUEUE_SPECS
from toposcope.catalogue.sim_metrics import SIM_SPECS
from toposcope.catalogue.slurm_gres_metrics import SLURM_GRES_SPECS

__all__ = ["CATALOGUE", "GPU_KEYS", "MetricSpec", "MetricType", "families", "nonempty", "spec"]

_SPECS: tuple[MetricSpec, ...] = (
    HOST_SPECS
    + GPU_SPECS
    + SLURM_GRES_SPECS
    + WORKLOAD_SPECS
    + DRA_SPECS
    + NODE_FABRIC_SPECS
    + ADVISOR_SPECS
    + SIM_SPECS
    + DAEMON_SPECS
    + QUEUE_SPECS
    + JOB_FABRIC_SPECS
)

CATALOGUE: dict[str, MetricSpec] = {spec.name: spec for spec in _SPECS}


def spec(name: str) -> MetricSpec:
    """Return the catalogue row for ``name``; ``KeyError`` names unknown metrics."""
    try:
        return CATALOGUE[name]
    except KeyError:
        raise KeyError(f"metric {name!r} is not in the toposcope catalogue") from None


def families(names: Iterable[str]) -> dict[str, GaugeMetricFamily | CounterMetricFamily]:
    """Fresh families for several catalogue names, keyed by name."""
    return {name: spec(name).family() for name in names}


def nonempty(families_: Iterable[Metric]) -> list[Metric]:
    """Drop families without samples so that a scrape never carries empty HELP/TYPE blocks."""
    return [f for f in families_ if f.samples]


class _Built:
    """Adapts families already built to the collector interface ``generate_latest`` expects."""

    def __init__(self, families: Iterable[Metric]) -> None:
        self.families = list(families)

    def collect(self) -> Iterable[Metric]:
        """The families."""
        return self.families


def families_text(families: Iterable[Metric]) -> bytes:
    """Client_python families already built (a service's own, a one-off report's) in the
    Prometheus text format, as ``generate_latest`` writes them.
    """
    return generate_latest(_Built(families))
