"""Reading a node's gres.conf and checking its GPU lines against the topology.

Slurm picks the GPUs of a job inside a node from gres.conf: ``Cores=`` (with
``--gres-flags=enforce-binding``) and ``Links=``. :func:`parse_gres_conf` reads the lines that
apply to one node, :func:`check_gres` compares them with :func:`~toposcope.topology.gresconf.
expected_gres` so that a wrong file shows up on every node that has it.

What is read, as Slurm reads it (:mod:`toposcope.slurmconf_lines`: comments, continued
lines, quoted values, ``Key=Value`` words with keys in any case, a key given twice on one
line refused); a line with ``NodeName=`` (a Slurm host list, ``gpu[01-16]``) applies only to
those nodes, one without to every node; ``Name=gpu`` lines with ``File=`` (a device path or a
bracketed range, ``/dev/nvidia[0-3]``, each file one GPU whose index is the path's trailing
number) give ``Cores=`` (Slurm's logical core indices) and ``Links=`` (one count per GPU);
``AutoDetect=nvml`` (alone or on a node's line) means Slurm asks NVML itself, so the lines
are not what it uses. Other GRES, ``Count=``-only lines and unknown keys are skipped. The file
comes from the host, so it is bounded (:data:`MAX_BYTES`, :data:`MAX_GPUS`) and every refusal
is a :class:`ConfigError` naming the file and line.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from toposcope.errors import ConfigError
from toposcope.hostlist import HostlistError, expand_hostlist, parse_indices, split_outside
from toposcope.slurmconf_lines import key_values, logical_lines
from toposcope.topology.gresconf import GpuGres

#: the largest gres.conf read, in bytes
MAX_BYTES = 1 << 20
#: the most GPU device files one node's lines may name
MAX_GPUS = 1024
#: where Slurm reads gres.conf unless configured otherwise
DEFAULT_GRES_CONF = "/etc/slurm/gres.conf"
_DEVICE_RE = re.compile(r"/[A-Za-z0-9_./-]{1,200}?([0-9]{1,4})")
_BRACKET_RE = re.compile(r"([^\[\]]*)\[([0-9,\-]{1,200})\]([^\[\]]*)")
_TYPE_RE = re.compile(r"[A-Za-z0-9_.+-]{1,64}")


@dataclass(frozen=True)
class FileGpu:
    """One GPU as a gres.conf line declares it (``None``: the key is absent)."""

    index: int
    device_file: str
    line_number: int
    gpu_type: str | None = None
    cores: tuple[int, ...] | None = None
    links: tuple[int, ...] | None = None


@dataclass(frozen=True)
class NodeGresConf:
    """The gres.conf lines that apply to one node: AutoDetect and its GPUs by index."""

    autodetect: str | None = None
    gpus: dict[int, FileGpu] = field(default_factory=dict)


@dataclass(frozen=True)
class GresCheck:
    """One GPU's field (``cores`` or ``links``) checked: ``source`` says what Slurm uses.

    ``source`` is ``gres.conf`` (the file's line), ``missing`` (no line for the GPU) or
    ``autodetect`` (Slurm detects the GPUs through NVML, so nothing to fix).
    """

    gpu: int
    field: str
    match: bool
    source: str


def _words(text: str, where: str) -> dict[str, str]:
    try:
        return key_values(text, where)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def _devices(text: str, where: str) -> list[tuple[int, str]]:
    """(index, path) of every device file of a ``File=`` value."""
    found: list[tuple[int, str]] = []
    for item in split_outside(text, "[", "]", "File"):
        bracket = _BRACKET_RE.fullmatch(item)
        paths = (
            [f"{bracket.group(1)}{n}{bracket.group(3)}" for n in parse_indices(bracket.group(2))]
            if bracket
            else [item]
        )
        for path in paths:
            match = _DEVICE_RE.fullmatch(path)
            if match is None:
                raise ConfigError(f"{where}: File {path[:80]!r} is no device path with a number")
            found.append((int(match.group(1)), path))
            if len(found) > MAX_GPUS:
                raise ConfigError(f"{where}: File names more than {MAX_GPUS} devices")
    return found


def _numbers(text: str, key: str, where: str) -> tuple[int, ...]:
    try:
        if key == "links":
            return tuple(int(cell) for cell in text.split(","))
        return parse_indices(text)
    except ValueError:
        raise ConfigError(f"{where}: malformed {key.capitalize()}= {text[:80]!r}") from None


def _gpu_lines(words: dict[str, str], where: str, number: int) -> list[FileGpu]:
    gpu_type = words.get("type")
    if gpu_type is not None and _TYPE_RE.fullmatch(gpu_type) is None:
        raise ConfigError(f"{where}: malformed Type= {gpu_type[:80]!r}")
    cores = _numbers(words["cores"], "cores", where) if "cores" in words else None
    links = _numbers(words["links"], "links", where) if "links" in words else None
    return [
        FileGpu(index, path, number, gpu_type, cores, links)
        for index, path in _devices(words.get("file", ""), where)
    ]


def parse_gres_conf(
    text: str, node_names: Iterable[str], source: str = "gres.conf"
) -> NodeGresConf:
    """The lines of gres.conf ``text`` that apply to a node called any of ``node_names``.

    Raises :class:`ConfigError` naming ``source`` and the line for a malformed line, a file
    too large, or two lines declaring one GPU.
    """
    if len(text) > MAX_BYTES:
        raise ConfigError(f"{source} is larger than {MAX_BYTES:,} bytes")
    names = set(node_names)
    autodetect: str | None = None
    gpus: dict[int, FileGpu] = {}
    for number, line in logical_lines(text):
        if not line.strip():
            continue
        where = f"{source} line {number}"
        words = _words(line, where)
        try:
            if "nodename" in words and not names & set(expand_hostlist(words["nodename"])):
                continue
            if "autodetect" in words:
                autodetect = words["autodetect"].lower()
            if words.get("name", "").lower() != "gpu" or "file" not in words:
                continue
            for gpu in _gpu_lines(words, where, number):
                if gpu.index in gpus:
                    raise ConfigError(
                        f"{where}: GPU {gpu.index} is declared again "
                        f"(first on line {gpus[gpu.index].line_number})"
                    )
                gpus[gpu.index] = gpu
        except HostlistError as exc:
            raise ConfigError(f"{where}: {exc}") from None
    return NodeGresConf(autodetect, gpus)


def _links_match(declared: tuple[int, ...] | None, expected: tuple[int, ...] | None) -> bool:
    if expected is None:  # no NVLink: Slurm's default (no Links=) or a row of PCIe paths
        return declared is None or all(n <= 0 for n in declared)
    return declared == expected


def check_gres(conf: NodeGresConf, expected: Sequence[GpuGres]) -> list[GresCheck]:
    """Per expected GPU, whether gres.conf's ``Cores=`` and ``Links=`` match the topology.

    ``cores`` is checked only where the topology knows the GPU's locality.
    """
    checks: list[GresCheck] = []
    for gpu in expected:
        declared = conf.gpus.get(gpu.index)
        if conf.autodetect == "nvml":
            fields = [("cores", True), ("links", True)]
            source = "autodetect"
        elif declared is None:
            fields = [("cores", False), ("links", gpu.links is None)]
            source = "missing"
        else:
            cores_ok = declared.cores is not None and set(declared.cores) == set(gpu.cores)
            fields = [("cores", cores_ok), ("links", _links_match(declared.links, gpu.links))]
            source = "gres.conf"
        checks.extend(
            GresCheck(gpu.index, name, ok, source)
            for name, ok in fields
            if name != "cores" or gpu.cores
        )
    return checks
