"""``slurm_gres`` collector: does this node's gres.conf give Slurm the GPUs' real locality?

Slurm picks a job's GPUs and CPUs inside a node from gres.conf's ``Cores=`` and ``Links=``.
This collector (off by default: ``--collector.slurm_gres``, ``--slurm.gres-conf PATH``) reads
the lines that apply to this node (its ``--hostname`` or that name's first label, against the
lines' ``NodeName=`` host lists), compares them with the lines toposcope writes from the
topology it already has (sysfs, with NVML's GPUs and link matrix where NVML is up, as the
``gpu`` collector sees them) and publishes, per GPU, whether each field matches and the
expected line. A missing, unreadable or malformed file fails the collector (success 0, the
reason logged once), never the scrape.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from prometheus_client.core import Metric

from toposcope.catalogue import spec
from toposcope.errors import ConfigError, NoDataError
from toposcope.exporters.context import CollectorContext
from toposcope.exporters.exposition import FamilyWriter
from toposcope.exporters.registry import CollectorEntry
from toposcope.identity.names import is_node_name
from toposcope.topology.gresconf import DEFAULT_DEVICE_FILE, expected_gres
from toposcope.topology.gresconf_file import MAX_BYTES, check_gres, parse_gres_conf
from toposcope.topology.model import Topology
from toposcope.topology.nvml import merge_nvml_gpus


class SlurmGresCollector:
    """Compares the node's gres.conf with the GPU lines of its topology on every scrape."""

    def __init__(self, ctx: CollectorContext) -> None:
        self._ctx = ctx
        self._path = Path(ctx.config.slurm_gres_conf)
        hostname = ctx.config.hostname
        short = hostname.split(".", 1)[0]
        self._names = {hostname, short} - {""}
        self._node = short if is_node_name(short) else None

    def _topology(self) -> Topology:
        topology = self._ctx.topology.get()
        source = self._ctx.nvml
        if source is None or source.devices is None:
            return topology
        gpus, links = source.devices.gpu_topology()
        return merge_nvml_gpus(topology, gpus, links)

    def _read(self) -> str:
        try:
            with self._path.open("rb") as handle:
                data = handle.read(MAX_BYTES + 1)
        except OSError as exc:
            raise ConfigError(f"cannot read gres.conf {self._path}: {exc.strerror}") from None
        try:
            return data.decode()
        except UnicodeDecodeError:
            raise ConfigError(f"gres.conf {self._path} is not UTF-8 text") from None

    def collect(self) -> Iterator[Metric]:
        """Yield the per-GPU match and expected-line families."""
        expected = expected_gres(self._topology())
        if not expected:
            raise NoDataError("no GPU in the topology: nothing for gres.conf to declare")
        conf = parse_gres_conf(self._read(), self._names, str(self._path))
        match = FamilyWriter(spec("toposcope_slurm_gres_config_match"))
        for check in check_gres(conf, expected):
            match.add_metric(
                [str(check.gpu), check.field, check.source], 1.0 if check.match else 0.0
            )
        info = FamilyWriter(spec("toposcope_slurm_gres_expected_info"))
        for gpu in expected:
            declared = conf.gpus.get(gpu.index)
            line = gpu.line(
                node=self._node,
                device_file=declared.device_file if declared else DEFAULT_DEVICE_FILE,
                gpu_type=declared.gpu_type if declared else None,
            )
            info.add_metric([str(gpu.index), line], 1.0)
        yield match.plain()
        yield info.plain()


ENTRY = CollectorEntry(
    name="slurm_gres",
    default_enabled=False,
    factory=SlurmGresCollector,
    description="Slurm gres.conf Cores=/Links= checked against the topology (--slurm.gres-conf)",
)
