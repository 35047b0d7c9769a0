"""The files of a one-host Slurm cluster: slurm.conf, gres.conf, cgroup.conf, keys, fake GPUs.

:class:`ClusterSpec` describes the cluster (how many nodes, their shape, their GPUs) and
:class:`ClusterLayout` where everything lives under one state directory; :func:`write_files`
writes it all. Every daemon stays on loopback (``CommunicationParameters=NoCtldInAddrAny,
NoInAddrAny``, all nodes ``NodeAddr=127.0.0.1`` with their own ``Port=``), the cluster uses
its own munged socket (``AuthInfo=socket=...``) and its own JWT key, so it disturbs nothing
else on the host. Fake GPUs are character devices with NVIDIA's major number (195): Slurm
checks that ``File=`` names a device and constrains access to it, and opening one gives ENXIO.

Like :mod:`toposcope.slurm.localcluster`, this module uses the standard library only.
"""

from __future__ import annotations

import os
import secrets
import stat
from dataclasses import dataclass
from pathlib import Path

#: NVIDIA's character-device major number (``/dev/nvidia0`` is 195,0).
NVIDIA_MAJOR = 195
_JWT_KEY_BYTES = 32
_MUNGE_KEY_BYTES = 1024


@dataclass(frozen=True)
class NodeShape:
    """One node's hardware as slurm.conf declares it (the host may have fewer CPUs).

    GPUs are split evenly over the sockets, each group with ``Cores=`` of its socket.
    """

    sockets: int = 2
    cores_per_socket: int = 4
    threads_per_core: int = 1
    gpus: int = 4
    gpu_type: str | None = None
    memory_mb: int = 4000

    @property
    def cpus(self) -> int:
        """CPUs (hardware threads) of the node."""
        return self.sockets * self.cores_per_socket * self.threads_per_core

    @property
    def gres(self) -> str:
        """The node's ``Gres=`` value (``gpu:4`` or ``gpu:a100:4``)."""
        if not self.gpus:
            return ""
        return f"gpu:{self.gpu_type}:{self.gpus}" if self.gpu_type else f"gpu:{self.gpus}"


@dataclass(frozen=True)
class DescribedNode:
    """A node with its own shape and its own gres.conf lines (e.g. a simulated machine's).

    ``gres_lines`` are complete ``NodeName=... Name=gpu File=... Cores=...`` lines whose
    ``File=`` names the cluster's fake devices.
    """

    name: str
    shape: NodeShape
    gres_lines: tuple[str, ...] = ()


@dataclass(frozen=True)
class ClusterSpec:
    """A cluster of ``nodes`` identical nodes named ``<node_prefix>1`` ... in one partition.

    ``cgroups``: ``True`` for ``proctrack/cgroup`` + ``task/cgroup`` (cgroup v1, devices
    constrained), ``False`` for ``proctrack/linuxproc``, ``None`` to use cgroups where the host
    mounts cgroup v1 controllers. Node names also name the nodes' cgroup directories
    (``slurm_<node>``), so two clusters on one host need different prefixes. ``described``
    nodes, when given, replace the ``nodes`` identical ones (names, shapes, gres.conf lines).
    ``topology_conf``, when given, is written as ``topology.conf`` and slurm.conf then names
    ``TopologyPlugin=topology/tree`` (the file comes from ``toposcope slurm topology-conf``).
    """

    nodes: int = 4
    shape: NodeShape = NodeShape()
    node_prefix: str = "n"
    name: str = "toposcope"
    partition: str = "gpu"
    cgroups: bool | None = None
    rest: bool = True
    described: tuple[DescribedNode, ...] = ()
    topology_conf: str = ""

    @property
    def node_names(self) -> tuple[str, ...]:
        """The nodes' names, in order."""
        if self.described:
            return tuple(node.name for node in self.described)
        return tuple(f"{self.node_prefix}{i}" for i in range(1, self.nodes + 1))

    @property
    def shapes(self) -> tuple[NodeShape, ...]:
        """Each node's shape, in the order of :attr:`node_names`."""
        if self.described:
            return tuple(node.shape for node in self.described)
        return (self.shape,) * self.nodes

    @property
    def max_gpus(self) -> int:
        """The most GPUs of one node (how many fake devices the host needs)."""
        return max((shape.gpus for shape in self.shapes), default=0)


@dataclass(frozen=True)
class Ports:
    """The loopback TCP ports of the controller, each node and slurmrestd."""

    ctld: int
    nodes: tuple[int, ...]
    rest: int


@dataclass(frozen=True)
class ClusterLayout:
    """Where each file of a cluster lives under its state directory."""

    root: Path

    @property
    def etc(self) -> Path:
        """Configuration: slurm.conf, gres.conf, cgroup.conf, the JWT key."""
        return self.root / "etc"

    @property
    def slurm_conf(self) -> Path:
        """slurm.conf, what ``SLURM_CONF`` points the commands at."""
        return self.etc / "slurm.conf"

    @property
    def gres_conf(self) -> Path:
        """gres.conf, next to slurm.conf where Slurm looks for it."""
        return self.etc / "gres.conf"

    @property
    def topology_conf(self) -> Path:
        """topology.conf (the switch tree), next to slurm.conf where Slurm looks for it."""
        return self.etc / "topology.conf"

    @property
    def jwt_key(self) -> Path:
        """The HS256 key slurmctld signs and checks JWTs with (mode 0600)."""
        return self.etc / "jwt_hs256.key"

    @property
    def dev(self) -> Path:
        """The fake GPU devices (``nvidia0`` ...)."""
        return self.root / "dev"

    @property
    def munge(self) -> Path:
        """munged's key, socket, pid and log."""
        return self.root / "munge"

    @property
    def run(self) -> Path:
        """Pid files."""
        return self.root / "run"

    @property
    def log(self) -> Path:
        """Daemon logs."""
        return self.root / "log"

    @property
    def out(self) -> Path:
        """Where test jobs write their output (the ``--output`` of :meth:`LocalCluster.sbatch`)."""
        return self.root / "out"

    def device(self, index: int) -> Path:
        """The fake device of GPU ``index``."""
        return self.dev / f"nvidia{index}"


def slurm_conf_text(spec: ClusterSpec, layout: ClusterLayout, ports: Ports, cgroups: bool) -> str:
    """slurm.conf for the cluster, every daemon on 127.0.0.1."""
    root = layout.root
    tracking = (
        ["ProctrackType=proctrack/cgroup", "TaskPlugin=task/cgroup,task/affinity"]
        if cgroups
        else ["ProctrackType=proctrack/linuxproc", "TaskPlugin=task/affinity"]
    )
    lines = [
        f"ClusterName={spec.name}",
        "SlurmctldHost=localhost(127.0.0.1)",
        "SlurmUser=root",
        "SlurmdUser=root",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        f"AuthInfo=socket={layout.munge / 'munge.socket'}",
        "AuthAltTypes=auth/jwt",
        f"AuthAltParameters=jwt_key={layout.jwt_key}",
        "CommunicationParameters=NoCtldInAddrAny,NoInAddrAny",
        f"SlurmctldPort={ports.ctld}",
        f"SlurmdPort={ports.nodes[0]}",
        f"StateSaveLocation={root / 'state'}",
        f"SlurmdSpoolDir={root / 'spool'}/%n",
        f"SlurmctldPidFile={layout.run / 'slurmctld.pid'}",
        f"SlurmdPidFile={layout.run}/slurmd-%n.pid",
        f"SlurmctldLogFile={layout.log / 'slurmctld.log'}",
        f"SlurmdLogFile={layout.log}/slurmd-%n.log",
        "SlurmctldDebug=info",
        "SlurmdDebug=info",
        "MailProg=/bin/true",
        *tracking,
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core",
        "GresTypes=gpu",
        "SchedulerType=sched/backfill",
        "AccountingStorageType=accounting_storage/none",
        "JobAcctGatherType=jobacct_gather/none",
        "JobCompType=jobcomp/none",
        "JobRequeue=1",
        "KillWait=2",
        "ReturnToService=2",
        "MpiDefault=none",
        "SlurmdParameters=config_overrides",
    ]
    if spec.topology_conf:
        lines.append("TopologyPlugin=topology/tree")
    for name, port, shape in zip(spec.node_names, ports.nodes, spec.shapes, strict=True):
        gres = f" Gres={shape.gres}" if shape.gres else ""
        lines.append(
            f"NodeName={name} NodeHostname=localhost NodeAddr=127.0.0.1 Port={port} "
            f"Sockets={shape.sockets} CoresPerSocket={shape.cores_per_socket} "
            f"ThreadsPerCore={shape.threads_per_core} RealMemory={shape.memory_mb}{gres} "
            "State=UNKNOWN"
        )
    lines.append(
        f"PartitionName={spec.partition} Nodes={','.join(spec.node_names)} Default=YES "
        "MaxTime=INFINITE State=UP"
    )
    return "\n".join(lines) + "\n"


def gres_conf_text(spec: ClusterSpec, layout: ClusterLayout) -> str:
    """gres.conf giving each socket its share of the GPUs, with that socket's cores.

    Described nodes bring their own lines.
    """
    lines = ["AutoDetect=off"]
    if spec.described:
        lines.extend(line for node in spec.described for line in node.gres_lines)
        return "\n".join(lines) + "\n"
    shape = spec.shape
    per_socket = -(-shape.gpus // shape.sockets) if shape.gpus else 0
    type_text = f" Type={shape.gpu_type}" if shape.gpu_type else ""
    for socket in range(shape.sockets):
        first, last = socket * per_socket, min(shape.gpus, (socket + 1) * per_socket) - 1
        if first > last:
            continue
        files = (
            f"{layout.dev}/nvidia[{first}-{last}]" if last > first else f"{layout.device(first)}"
        )
        core_lo = socket * shape.cores_per_socket
        core_hi = core_lo + shape.cores_per_socket - 1
        lines.extend(
            f"NodeName={name} Name=gpu{type_text} File={files} Cores={core_lo}-{core_hi}"
            for name in spec.node_names
        )
    return "\n".join(lines) + "\n"


CGROUP_CONF = """CgroupPlugin=cgroup/v1
CgroupMountpoint=/sys/fs/cgroup
ConstrainCores=no
ConstrainDevices=yes
ConstrainRAMSpace=no
ConstrainSwapSpace=no
"""


def _write_private(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` created with mode 0600 (never wider, not even briefly)."""
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)


def make_devices(layout: ClusterLayout, count: int) -> None:
    """Create fake GPU character devices ``nvidia0`` ... (needs root: mknod)."""
    layout.dev.mkdir(parents=True, exist_ok=True)
    for index in range(count):
        path = layout.device(index)
        if not path.exists():
            os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(NVIDIA_MAJOR, index))
            os.chmod(path, 0o666)


def write_files(
    spec: ClusterSpec, layout: ClusterLayout, ports: Ports, cgroups: bool, gres_conf: str | None
) -> None:
    """Create the state directory and write every file the daemons read.

    The directory and its configuration are readable by all (slurmrestd runs as ``nobody``),
    the keys by their owner only. ``gres_conf`` replaces the generated gres.conf.
    """
    for directory in (layout.etc, layout.run, layout.log, layout.out, layout.root / "state"):
        directory.mkdir(parents=True, exist_ok=True)
    for name in spec.node_names:
        (layout.root / "spool" / name).mkdir(parents=True, exist_ok=True)
    layout.munge.mkdir(mode=0o755, exist_ok=True)
    for directory in (layout.root, layout.etc, layout.munge):
        directory.chmod(0o755)
    make_devices(layout, spec.max_gpus)
    _write_private(layout.jwt_key, secrets.token_bytes(_JWT_KEY_BYTES))
    _write_private(layout.munge / "munge.key", secrets.token_bytes(_MUNGE_KEY_BYTES))
    layout.slurm_conf.write_text(slurm_conf_text(spec, layout, ports, cgroups))
    layout.gres_conf.write_text(
        gres_conf if gres_conf is not None else gres_conf_text(spec, layout)
    )
    (layout.etc / "cgroup.conf").write_text(CGROUP_CONF)
    if spec.topology_conf:
        layout.topology_conf.write_text(spec.topology_conf)
