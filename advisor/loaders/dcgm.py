"""GPU traffic and activity read from dcgm-exporter (``--gpu-metrics-source dcgm``).

Clusters that already run dcgm-exporter may not want toposcope to read NVML's profiling
counters a second time (GPM and DCGM's profiling module contend for the same hardware
counters). :class:`DcgmActivity` wraps a backend and answers the advisor's GPU activity
queries (:data:`DCGM_FIELDS`) from dcgm-exporter's ``DCGM_FI_PROF_*`` series instead, in the
shape of toposcope's: the ``TX``/``RX`` fields become one answer with a ``direction`` label,
and dcgm's byte rates are averaged over the window (they are already bytes per second,
:data:`~toposcope.catalogue.dcgm_joins.DCGM_EQUIVALENTS`). Every other query goes to the
wrapped backend unchanged; the per-workload activity queries get no series (dcgm-exporter
names pods, not toposcope's workloads), so the model uses each workload's GPUs' figures.

The series keep dcgm-exporter's labels; the model builder joins them to toposcope's GPUs by
``UUID``, else by ``Hostname`` and ``pci_bus_id`` (the keys
:mod:`toposcope.catalogue.dcgm_joins` documents), and skips MIG instances (``GPU_I_ID``).
The run's ``--prometheus-selector`` is not applied to them: it selects toposcope's series,
and dcgm-exporter runs as another job; the join keeps only the selected GPUs.
"""

from __future__ import annotations

from dataclasses import replace

from toposcope.advisor.loaders.base import MetricsBackend, Query, QueryResult, Window

#: the advisor's GPU activity queries answered from dcgm-exporter: query name -> (dcgm field,
#: labels added to its series) for each field whose series make up the answer
DCGM_FIELDS: dict[str, tuple[tuple[str, dict[str, str]], ...]] = {
    "gpu-pcie-rate": (
        ("DCGM_FI_PROF_PCIE_TX_BYTES", {"direction": "tx"}),
        ("DCGM_FI_PROF_PCIE_RX_BYTES", {"direction": "rx"}),
    ),
    "gpu-nvlink-rate": (
        ("DCGM_FI_PROF_NVLINK_TX_BYTES", {"direction": "tx", "link": ""}),
        ("DCGM_FI_PROF_NVLINK_RX_BYTES", {"direction": "rx", "link": ""}),
    ),
    "gpu-sm-active": (("DCGM_FI_PROF_SM_ACTIVE", {}),),
    "gpu-sm-occupancy": (("DCGM_FI_PROF_SM_OCCUPANCY", {}),),
    "gpu-tensor-active": (("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", {}),),
    "gpu-dram-active": (("DCGM_FI_PROF_DRAM_ACTIVE", {}),),
}
#: per-workload activity queries: dcgm-exporter has no toposcope workload to attribute to
WORKLOAD_ACTIVITY_QUERIES: frozenset[str] = frozenset(
    {"workload-gpu-pcie-rate", "workload-gpu-nvlink-rate", "workload-gpu-sm-active"}
)
#: ``--gpu-metrics-source`` choices
GPU_METRICS_SOURCES: tuple[str, ...] = ("toposcope", "dcgm")


class DcgmActivity:
    """A :class:`~.base.MetricsBackend` answering GPU activity queries from dcgm-exporter's
    series through ``inner``, and every other query as ``inner`` does.
    """

    def __init__(self, inner: MetricsBackend) -> None:
        self.inner = inner

    @property
    def source(self) -> str:
        """The wrapped backend's description, saying where GPU activity comes from."""
        return f"{self.inner.source} (GPU activity from dcgm-exporter)"

    def refresh(self) -> None:
        """Refresh the wrapped backend."""
        self.inner.refresh()

    def load(self, query: Query, window: Window) -> QueryResult:
        """Answer ``query``: from dcgm-exporter's fields for a GPU activity query (their
        series merged, each with its added labels), nothing for a workload activity query,
        else from ``inner``.
        """
        if query.name in WORKLOAD_ACTIVITY_QUERIES:
            return QueryResult(f"dcgm: no per-workload {query.metric}", "")
        fields = DCGM_FIELDS.get(query.name)
        if fields is None:
            return self.inner.load(query, window)
        parts = [
            (self.inner.load(_dcgm_query(query, field), window), extra) for field, extra in fields
        ]
        return QueryResult(
            "; ".join(result.query for result, _ in parts),
            fields[0][0],
            tuple(
                replace(sample, labels={**sample.labels, **extra})
                for result, extra in parts
                for sample in result.samples
            ),
            warnings=tuple(w for result, _ in parts for w in result.warnings),
            dropped=sum(result.dropped for result, _ in parts),
        )


def _dcgm_query(query: Query, field: str) -> Query:
    """The query of one dcgm-exporter field: its mean over the window, without the run's
    selector (see the module docstring).
    """
    return Query(name=query.name, metric=field, reduction="avg", selector="")


def with_gpu_metrics_source(backend: MetricsBackend, source: str) -> MetricsBackend:
    """``backend`` reading GPU activity from ``source`` (``toposcope``: as it is)."""
    return DcgmActivity(backend) if source == "dcgm" else backend
