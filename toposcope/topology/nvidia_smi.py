"""Build a :class:`~toposcope.topology.model.Topology` from ``nvidia-smi topo -m`` text.

``nvidia-smi topo -m`` is the one topology view every NVIDIA driver prints, and people paste
it into tickets, so reading it lets the advisor reason about GPU placement on machines we
cannot reach. The text looks like this (cells separated by tabs, or by spaces once copied
through a terminal; a tty may add ANSI colour codes)::

            GPU0    GPU1    NIC0    CPU Affinity    NUMA Affinity   GPU NUMA ID
    GPU0     X      NV12    PXB     48-63,176-191   3               N/A
    GPU1    NV12     X      PXB     48-63,176-191   3               N/A
    NIC0    PXB     PXB      X

    Legend:
      X    = Self
      SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes
      ...
    NIC Legend:
      NIC0: mlx5_0

What is read:

* link cells ``X``, ``NV<n>``, ``PIX``, ``PXB``, ``PHB``, ``NODE``, ``SYS`` and the pre-2017
  ``SOC`` (reported as ``SYS``, its later name); every ordered GPU pair gets a
  :class:`~toposcope.topology.model.GpuLink`, both directions, no self links;
* ``CPU Affinity`` (a cpulist, or ``N/A``) becomes each GPU's ``local_cpus``;
  ``NUMA Affinity`` (an int, or ``N/A``; drivers from about R450) its ``numa_node`` (a GPU
  whose affinity spans several nodes, ``0-1``, gets none);
  ``GPU NUMA ID`` (R535+, the node holding the GPU's own memory on Grace Hopper, else
  ``N/A``) adds a memory-only NUMA node;
* NIC columns (``NIC0``, or ``mlx5_0`` on older drivers) become NICs, named as the ``NIC
  Legend`` below the matrix names them (``NIC0: mlx5_0``, newer drivers), else by their column, and
  each GPU's cell in a NIC column a :class:`~toposcope.topology.model.GpuNicLink`. nvidia-smi
  lists RDMA devices without their PCI address or link layer, so a NIC's ``pci_bus_id`` and
  ``kind`` are unknown; its NUMA node is the one node of the GPUs it reaches without
  crossing NUMA nodes (PIX, PXB, PHB or NODE), when they name one. NIC-to-NIC cells are
  checked but not kept;
* the other legend lines are ignored, and so are lines whose first non-blank character is ``#``
  (nvidia-smi never prints one; saved samples cite their source in such comment lines, and
  they may stand anywhere, even between matrix rows).

NUMA nodes are inferred from the affinities: one node per ``NUMA Affinity`` value, holding
the union of the CPU affinities of its GPUs, plus one memory-only node per ``GPU NUMA ID``.
Their memory is unknown (0) and there are no packages or distances. Without a ``NUMA
Affinity`` column no node id can be known, so none is invented. GPUs have no PCI bus id.

Malformed text raises :class:`~toposcope.errors.ConfigError` with the line number: no
``GPU0`` header, a row with the wrong number of cells, an unknown link label (``NV`` must be
followed by a link count), an affinity that is not a cpulist, a matrix that is not symmetric
(nvidia-smi prints the same link both ways), a GPU numbered :data:`GPU_LIMIT` or more (or
with a leading zero), or more than :data:`MAX_COLUMNS` matrix columns. The work done is
bounded by those limits and linear in the length of the text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from toposcope.cpulist import parse_cpulist
from toposcope.errors import ConfigError
from toposcope.topology.model import (
    Gpu,
    GpuLink,
    GpuNicLink,
    LinkType,
    Nic,
    NumaNode,
    Topology,
    link_type,
)

#: GPU numbers must be below this (a host with more GPUs does not exist).
GPU_LIMIT = 256
#: The most link columns (GPUs and NICs) a matrix may have.
MAX_COLUMNS = 1024

_ANSI_RE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
#: Header cells: the multi-word column names first, then any single word.
_HEADER_TOKEN_RE = re.compile(r"CPU Affinity|NUMA Affinity|GPU NUMA ID|\S+")
_GPU_RE = re.compile(r"GPU([0-9]+)")
#: ``NV<n>``: n bonded NVLinks (nvidia-smi's ``NV#``).
_NVLINK_RE = re.compile(r"NV[0-9]{1,3}")
_AFFINITY_COLUMNS = ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID")
#: A NIC legend line, ``  NIC0: mlx5_0``.
_NIC_LEGEND_RE = re.compile(r"^\s*(NIC[0-9]{1,4})\s*:\s*(\S{1,64})\s*$")
_NOT_AVAILABLE = {"N/A", "NA", "-", ""}


@dataclass(frozen=True)
class _Header:
    """The matrix header: link columns (GPUs and NICs), affinity columns, GPU numbers.

    ``gpus`` maps a GPU column's name (``GPU3``) to its GPU number (3).
    """

    line: int
    links: tuple[str, ...]
    affinities: tuple[str, ...]
    gpus: dict[str, int]


def _shown(cell: str) -> str:
    return repr(cell) if len(cell) <= 32 else f"{cell[:32]!r}..."


def _gpu_number(name: str, source: str, number: int) -> int | None:
    """The GPU number of a header cell (``GPU3`` -> 3), ``None`` for a NIC column."""
    match = _GPU_RE.fullmatch(name)
    if match is None:
        return None
    digits = match.group(1)
    if len(digits) > 1 and digits.startswith("0"):
        raise ConfigError(f"{source} line {number}: column {_shown(name)} has a leading zero")
    if len(digits) > len(str(GPU_LIMIT)) or int(digits) >= GPU_LIMIT:
        raise ConfigError(
            f"{source} line {number}: column {_shown(name)}: GPU numbers must be below {GPU_LIMIT}"
        )
    return int(digits)


def _clean(line: str) -> str:
    return _ANSI_RE.sub("", line).rstrip("\r\n")


def _is_comment(line: str) -> bool:
    return line.lstrip().startswith("#")


def _find_header(lines: list[str], source: str) -> _Header:
    for number, line in enumerate(lines, start=1):
        if _is_comment(line):
            continue
        tokens = _HEADER_TOKEN_RE.findall(line)
        if not tokens or tokens[0] != "GPU0":
            continue
        if "X" in tokens:
            raise ConfigError(
                f"{source} line {number}: matrix row before any header line (GPU0 GPU1 ...)"
            )
        links: list[str] = []
        affinities: list[str] = []
        for token in tokens:
            if token in _AFFINITY_COLUMNS:
                affinities.append(token)
            elif affinities:
                raise ConfigError(
                    f"{source} line {number}: column {_shown(token)} after the affinity columns"
                )
            else:
                links.append(token)
        if len(links) > MAX_COLUMNS:
            raise ConfigError(
                f"{source} line {number}: {len(links)} matrix columns, more than {MAX_COLUMNS}"
            )
        if len(set(links)) != len(links):
            raise ConfigError(f"{source} line {number}: repeated column in the header")
        gpus = {name: _gpu_number(name, source, number) for name in links}
        return _Header(
            number,
            tuple(links),
            tuple(affinities),
            {name: gpu for name, gpu in gpus.items() if gpu is not None},
        )
    raise ConfigError(
        f"{source}: no 'nvidia-smi topo -m' matrix found (no header line starting with GPU0)"
    )


def _link_label(cell: str, source: str, number: int) -> str:
    """A link cell as nvidia-smi's current label (``SOC`` becomes ``SYS``)."""
    label = cell.strip().upper()
    if label == "SOC":
        return "SYS"
    try:
        if label.startswith("NV") and _NVLINK_RE.fullmatch(label) is None:
            raise ValueError(label)
        link_type(label)
    except ValueError:
        raise ConfigError(f"{source} line {number}: unknown link type {_shown(cell)}") from None
    return label


def _node_ids(cell: str, column: str, source: str, number: int) -> tuple[int, ...]:
    """A NUMA id cell: one id, a list of ids (``0-1`` when a GPU spans nodes) or ``N/A``."""
    if cell.strip().upper() in _NOT_AVAILABLE:
        return ()
    try:
        return parse_cpulist(cell)
    except ValueError as exc:
        raise ConfigError(
            f"{source} line {number}: {column} {_shown(cell)} is not a node id: {exc}"
        ) from None


def _read_rows(lines: list[str], header: _Header, source: str) -> dict[str, tuple[int, list[str]]]:
    """The matrix rows below the header: row name -> (line number, cells after the name).

    Every link cell is checked (a known label, ``X`` exactly on the diagonal) and the row's
    width must match the header.
    """
    width = len(header.links)
    position = {name: i for i, name in enumerate(header.links)}
    rows: dict[str, tuple[int, list[str]]] = {}
    for number in range(header.line + 1, len(lines) + 1):
        line = lines[number - 1]
        if _is_comment(line):
            continue
        if not line.strip():
            if rows:
                break
            continue
        if line.strip().rstrip(":").lower().endswith("legend"):
            break
        cells = line.split()
        name, values = cells[0], cells[1:]
        if name not in position:
            raise ConfigError(f"{source} line {number}: row {_shown(name)} is not in the header")
        # NIC rows stop after the link columns; GPU rows carry every affinity column.
        allowed = {width + len(header.affinities)}
        if name not in header.gpus:
            allowed.add(width)
        if len(values) not in allowed:
            raise ConfigError(
                f"{source} line {number}: row {name} has {len(values)} cells, "
                f"expected {' or '.join(str(n) for n in sorted(allowed))}"
            )
        if values[position[name]].upper() != "X":
            raise ConfigError(f"{source} line {number}: row {name} has no X on the diagonal")
        if name in rows:
            raise ConfigError(f"{source} line {number}: row {name} appears twice")
        labels = [
            "X" if column == position[name] else _link_label(cell, source, number)
            for column, cell in enumerate(values[:width])
        ]
        rows[name] = (number, labels + values[width:])
    return rows


def _check_symmetric(rows: dict[str, tuple[int, list[str]]], header: _Header, source: str) -> None:
    """Refuse a matrix whose cell for (a, b) differs from the one for (b, a)."""
    position = {name: i for i, name in enumerate(header.links)}
    names = [name for name in header.links if name in rows]
    for first, name in enumerate(names):
        number, values = rows[name]
        for peer in names[first + 1 :]:
            peer_number, peer_values = rows[peer]
            there, back = values[position[peer]], peer_values[position[name]]
            if there != back:
                raise ConfigError(
                    f"{source} line {number}: {name} to {peer} is {there}, but line "
                    f"{peer_number} says {peer} to {name} is {back}; the matrix must be symmetric"
                )


def _nic_names(lines: list[str], header: _Header, source: str) -> dict[str, str]:
    """Each NIC column's name: the ``NIC Legend``'s (``NIC0`` -> ``mlx5_0``), else its own.

    Refuses a legend that gives two columns the same name, or a name that is a column.
    """
    columns = [name for name in header.links if name not in header.gpus]
    named: dict[str, str] = {}
    for number in range(header.line + 1, len(lines) + 1):
        match = _NIC_LEGEND_RE.match(lines[number - 1])
        if match is None or match.group(1) not in columns:
            continue
        column, name = match.groups()
        taken = set(named.values()) | (set(header.links) - {column})
        if name in taken:
            raise ConfigError(f"{source} line {number}: NIC name {_shown(name)} is used twice")
        named[column] = name
    return {column: named.get(column, column) for column in columns}


def _nics(names: dict[str, str], gpus: list[Gpu], links: list[GpuNicLink]) -> tuple[Nic, ...]:
    """The NICs in column order, each placed in the one NUMA node of the GPUs it reaches
    without crossing NUMA nodes (NODE or better), when there is one."""
    numa = {gpu.index: gpu.numa_node for gpu in gpus}
    nics: list[Nic] = []
    for name in names.values():
        near = {
            numa[link.gpu]
            for link in links
            if link.nic == name and link.type.rank <= LinkType.NODE.rank
        }
        only = near.pop() if len(near) == 1 else None
        node = () if only is None else (only,)
        nics.append(Nic(name=name, pci_bus_id=None, kind=None, numa_nodes=node))
    return tuple(nics)


def build_from_nvidia_smi_topo(text: str, source: str = "nvidia-smi") -> Topology:
    """Parse ``nvidia-smi topo -m`` output into GPUs, GPU links and inferred NUMA nodes.

    ``source`` names the input in errors and in :attr:`Topology.source`. Raises
    :class:`ConfigError` with the line number when the text is not a topology matrix.
    """
    lines = [_clean(line) for line in text.splitlines()]
    header = _find_header(lines, source)
    width = len(header.links)
    rows = _read_rows(lines, header, source)
    by_number = sorted(header.gpus.items(), key=lambda item: item[1])
    missing = [name for name, _ in by_number if name not in rows]
    if missing:
        raise ConfigError(f"{source}: no row for {', '.join(missing)}")
    _check_symmetric(rows, header, source)

    position = {name: i for i, name in enumerate(header.links)}
    nic_names = _nic_names(lines, header, source)
    gpus: list[Gpu] = []
    links: list[GpuLink] = []
    nic_links: list[GpuNicLink] = []
    node_cpus: dict[int, set[int]] = {}
    memory_nodes: set[int] = set()
    for name, index in by_number:
        number, values = rows[name]
        affinity = dict(zip(header.affinities, values[width:], strict=True))
        local: tuple[int, ...] = ()
        cpu_text = affinity.get("CPU Affinity", "N/A")
        if cpu_text.upper() not in _NOT_AVAILABLE:
            try:
                local = parse_cpulist(cpu_text)
            except ValueError as exc:
                raise ConfigError(f"{source} line {number}: CPU Affinity: {exc}") from None
        numa_ids = _node_ids(affinity.get("NUMA Affinity", "N/A"), "NUMA Affinity", source, number)
        numa = numa_ids[0] if len(numa_ids) == 1 else None
        if numa is not None:
            node_cpus.setdefault(numa, set()).update(local)
        memory_nodes.update(
            _node_ids(affinity.get("GPU NUMA ID", "N/A"), "GPU NUMA ID", source, number)
        )
        gpus.append(Gpu(index=index, pci_bus_id=None, numa_node=numa, local_cpus=local))
        for peer_name, peer_index in by_number:
            if peer_index != index:
                links.append(
                    GpuLink(gpu=index, peer_gpu=peer_index, link=values[position[peer_name]])
                )
        nic_links.extend(
            GpuNicLink(gpu=index, nic=nic, link=values[position[column]])
            for column, nic in nic_names.items()
        )

    clash = memory_nodes & set(node_cpus)
    if clash:
        raise ConfigError(
            f"{source}: NUMA node(s) {sorted(clash)} are both a CPU affinity and a GPU NUMA ID"
        )
    nodes = [
        NumaNode(id=node_id, package=None, cpus=tuple(sorted(cpus)), memory_bytes=0)
        for node_id, cpus in node_cpus.items()
    ] + [NumaNode(id=node_id, package=None, cpus=(), memory_bytes=0) for node_id in memory_nodes]
    return Topology(
        numa_nodes=tuple(sorted(nodes, key=lambda n: n.id)),
        gpus=tuple(gpus),
        gpu_links=tuple(links),
        source=source,
        nics=_nics(nic_names, gpus, nic_links),
        gpu_nic_links=tuple(nic_links),
    )
