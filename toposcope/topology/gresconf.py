"""gres.conf lines for a node, from toposcope's topology model.

Slurm picks a job's GPUs inside a node from gres.conf: ``Cores=`` says which cores are close
to each GPU (``--gres-flags=enforce-binding`` allocates only those), ``Links=`` how well each
GPU connects to the others (Slurm prefers GPU sets with more links). A wrong or missing
``Cores=`` is a silent cross-socket penalty for every job, so toposcope writes the lines from
the measured topology:

* one line per GPU (``Links=`` requires that), in GPU index order, ``File=`` from a template
  (``/dev/nvidia{index}``);
* ``Cores=`` lists Slurm's *logical core indices*, not CPU ids: cores are numbered socket by
  socket, each socket's cores in order of their first CPU (``lstopo -l``'s ``Core L#``), so on
  a machine with two threads per core or CPUs numbered across sockets the two differ. The
  cores are those holding the GPU's local CPUs (its NUMA node's CPUs);
* ``Links=`` gives, for every GPU, the number of NVLinks to each other GPU (``-1`` for itself,
  ``0`` for a PCIe path), as Slurm's own NVML detection writes it; it is left out when the
  topology knows no NVLink.

The topology needs each CPU's package and core (the sysfs and hwloc XML builders give them).
The writer lives in the core because two parts use it: ``toposcope slurm gres-conf`` (and the
local Slurm cluster's files) print the lines, the exporter's ``slurm_gres`` collector compares
a node's gres.conf with them (:func:`expected_gres` gives the per-GPU values it compares).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from toposcope.cpulist import format_cpulist
from toposcope.errors import ConfigError
from toposcope.topology.cores import ordered_cores
from toposcope.topology.model import LinkType, Topology

#: Where NVIDIA's driver puts GPU N's device file.
DEFAULT_DEVICE_FILE = "/dev/nvidia{index}"
_NVLINK_COUNT_RE = re.compile(r"NV([0-9]{1,3})", re.IGNORECASE)
_TYPE_RE = re.compile(r"[A-Za-z0-9_.+-]{1,64}")


def slurm_core_indices(topology: Topology) -> dict[int, int]:
    """CPU id -> Slurm's logical core index for every CPU of ``topology``.

    Raises :class:`ConfigError` when the topology does not say which core each CPU is on.
    """
    return {cpu: index for index, core in enumerate(ordered_cores(topology)) for cpu in core}


def _nvlinks(link: str) -> int:
    """How many NVLinks a link label stands for (``NV12`` -> 12, ``PIX`` -> 0)."""
    match = _NVLINK_COUNT_RE.fullmatch(link.strip())
    if match:
        return int(match.group(1))
    return 1 if link.strip().upper() == "NV" else 0


def _links_row(topology: Topology, gpu: int, indices: Iterable[int]) -> tuple[int, ...]:
    cells = []
    for peer in indices:
        if peer == gpu:
            cells.append(-1)
            continue
        link = topology.gpu_link(gpu, peer)
        cells.append(_nvlinks(link.link) if link else 0)
    return tuple(cells)


@dataclass(frozen=True)
class GpuGres:
    """What gres.conf should say about one GPU, from the topology.

    ``cores`` are Slurm's logical core indices near the GPU (empty: locality unknown, so no
    ``Cores=``); ``links`` the ``Links=`` row in GPU index order (``None``: the node has no
    NVLink, so no ``Links=``).
    """

    index: int
    cores: tuple[int, ...]
    links: tuple[int, ...] | None

    def line(
        self,
        *,
        node: str | None = None,
        device_file: str = DEFAULT_DEVICE_FILE,
        gpu_type: str | None = None,
    ) -> str:
        """The GPU's gres.conf line (``device_file`` has ``{index}``, checked by the caller)."""
        words = [f"NodeName={node}"] if node else []
        words.append("Name=gpu")
        if gpu_type:
            words.append(f"Type={gpu_type}")
        words.append(f"File={device_file.replace('{index}', str(self.index))}")
        if self.cores:
            words.append(f"Cores={format_cpulist(self.cores)}")
        if self.links is not None:
            words.append(f"Links={','.join(str(n) for n in self.links)}")
        return " ".join(words)


def expected_gres(topology: Topology) -> tuple[GpuGres, ...]:
    """Per GPU of ``topology`` (index order): the ``Cores=`` and ``Links=`` Slurm should get.

    Raises :class:`ConfigError` for a topology with GPUs but without core information.
    """
    gpus = sorted(topology.gpus, key=lambda g: g.index)
    if not gpus:
        return ()
    core_of = slurm_core_indices(topology)
    with_links = any(link.type is LinkType.NVLINK for link in topology.gpu_links)
    indices = [g.index for g in gpus]
    expected = []
    for gpu in gpus:
        local = gpu.local_cpus
        if not local and gpu.numa_node is not None:
            numa = topology.numa_node(gpu.numa_node)
            local = numa.cpus if numa else ()
        cores = tuple(sorted({core_of[c] for c in local if c in core_of}))
        links = _links_row(topology, gpu.index, indices) if with_links else None
        expected.append(GpuGres(gpu.index, cores, links))
    return tuple(expected)


def check_line_options(device_file: str, gpu_type: str | None) -> None:
    """Raise :class:`ConfigError` for a device template without ``{index}`` or a bad type."""
    if "{index}" not in device_file:
        raise ConfigError(f"--device-file {device_file[:80]!r} must contain {{index}}")
    if gpu_type is not None and _TYPE_RE.fullmatch(gpu_type) is None:
        raise ConfigError(
            f"GPU type {gpu_type[:80]!r} is not 1-64 letters, digits, '.', '_', '+', '-'"
        )


def node_shape(topology: Topology) -> tuple[int, int, int] | None:
    """(sockets, cores per socket, threads per core) of the topology, if uniform."""
    cores: dict[int, set[int]] = {}
    threads: dict[tuple[int, int], int] = {}
    for cpu in topology.cpus:
        if cpu.package is None or cpu.core is None:
            return None
        cores.setdefault(cpu.package, set()).add(cpu.core)
        threads[(cpu.package, cpu.core)] = threads.get((cpu.package, cpu.core), 0) + 1
    per_socket = {len(c) for c in cores.values()}
    per_core = set(threads.values())
    if len(per_socket) != 1 or len(per_core) != 1:
        return None
    return len(cores), per_socket.pop(), per_core.pop()


def node_line_hint(topology: Topology) -> str | None:
    """slurm.conf's ``Sockets= CoresPerSocket= ThreadsPerCore=`` for the topology, if uniform."""
    shape = node_shape(topology)
    if shape is None:
        return None
    sockets, cores, threads = shape
    return f"Sockets={sockets} CoresPerSocket={cores} ThreadsPerCore={threads}"


def gres_conf_lines(
    topology: Topology,
    *,
    node: str | None = None,
    device_file: str = DEFAULT_DEVICE_FILE,
    gpu_type: str | None = None,
) -> list[str]:
    """gres.conf lines for the GPUs of ``topology``, comments first.

    ``node`` adds ``NodeName=`` (for a cluster-wide gres.conf); ``device_file`` is the
    device path with ``{index}`` for the GPU index; ``gpu_type`` adds ``Type=`` (the node's
    ``Gres=gpu:TYPE:N`` must then match). Raises :class:`ConfigError` for a bad template or
    type and for a topology without core information.
    """
    check_line_options(device_file, gpu_type)
    lines = [f"# gres.conf lines written by toposcope from {topology.source or 'a topology'}"]
    expected = expected_gres(topology)
    if not expected:
        return [*lines, "# no GPU found: nothing to declare"]
    hint = node_line_hint(topology)
    if hint:
        type_part = f"{gpu_type}:" if gpu_type else ""
        lines.append(
            f"# slurm.conf: NodeName={node or 'NAME'} {hint} Gres=gpu:{type_part}{len(expected)}"
        )
    lines.append("# Cores= are Slurm's logical core indices (lstopo -l Core L#), not CPU ids")
    for gpu in expected:
        if not gpu.cores:
            lines.append(f"# GPU {gpu.index}: locality unknown, so no Cores= (any core may use it)")
        lines.append(gpu.line(node=node, device_file=device_file, gpu_type=gpu_type))
    return lines
