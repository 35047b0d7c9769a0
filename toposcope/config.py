"""Configuration values passed explicitly to the parts that need them (no globals).

:class:`HostPaths` says where the host's sysfs, procfs and root filesystem are, like
node_exporter's ``--path.sysfs``, ``--path.procfs`` and ``--path.rootfs``; tests point it at
fixture trees. :class:`WorkloadSettings` bounds what the workloads collector tracks.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from toposcope.errors import ConfigError
from toposcope.topology.gresconf_file import DEFAULT_GRES_CONF


@dataclass(frozen=True)
class HostPaths:
    """Roots of the filesystems the sources read.

    ``rootfs`` is where absolute paths found inside procfs (cgroup mount points from
    ``mountinfo``) are resolved; ``sysfs`` and ``procfs`` default to ``rootfs/sys`` and
    ``rootfs/proc``.
    """

    sysfs: Path = Path("/sys")
    procfs: Path = Path("/proc")
    rootfs: Path = Path("/")

    @classmethod
    def under(cls, root: str | os.PathLike[str]) -> HostPaths:
        """Paths for a whole snapshot tree that holds ``sys/`` and ``proc/`` (``--root DIR``)."""
        base = Path(root)
        return cls(sysfs=base / "sys", procfs=base / "proc", rootfs=base)

    @classmethod
    def from_options(
        cls, rootfs: str | None = None, sysfs: str | None = None, procfs: str | None = None
    ) -> HostPaths:
        """Paths from ``--path.rootfs`` / ``--path.sysfs`` / ``--path.procfs`` (each optional).

        As in node_exporter, sysfs and procfs not given explicitly sit under the rootfs, so
        one ``--path.rootfs /host`` serves a container that mounts the host at ``/host``.
        """
        root = Path(rootfs or "/")
        return cls(
            sysfs=Path(sysfs) if sysfs else root / "sys",
            procfs=Path(procfs) if procfs else root / "proc",
            rootfs=root,
        )

    def check(self) -> None:
        """Raise :class:`ConfigError` when the sysfs root does not exist (a typo, not a host)."""
        if not self.sysfs.is_dir():
            raise ConfigError(f"sysfs root {self.sysfs} does not exist or is not a directory")
        if not self.procfs.exists():
            # Some snapshot trees (hwloc's) have no proc/; sources treat it as empty.
            return

    def in_rootfs(self, absolute: str) -> Path:
        """Resolve an absolute host path (as written in mountinfo) under ``rootfs``."""
        return self.rootfs / absolute.lstrip("/")


@dataclass(frozen=True)
class WorkloadSettings:
    """What the workloads collector tracks and how much of it.

    ``mode`` is ``cgroup`` (one workload per leaf cgroup that has processes: containers,
    pods, systemd services, Slurm jobs) or ``process`` (one per top-level process tree).
    ``include``/``exclude`` are regular expressions matched against the cgroup path (or the
    process ``comm`` in process mode). ``max_workloads`` caps cardinality; workloads beyond it
    are counted in ``toposcope_workloads_dropped_total``. ``min_cpu_seconds`` skips idle
    noise such as getty or sshd. ``gpu_device_pattern`` matches open descriptors' targets
    (group 1 = the device minor). ``gpu_fds`` turns the ``/proc/PID/fd`` scan for GPU
    device files on or off; ``numa_maps`` allows the ``/proc/PID/numa_maps`` fallback for
    memory placement (off on hosts with huge processes: the kernel walks their page tables
    under the mmap lock to answer). ``sample_interval`` is how often a background sampler
    reads the workloads (seconds; the exporter serves the last complete sample and exports its
    age); 0 reads them inside every scrape (one-shot prints, the simulator, tests).
    """

    mode: str = "cgroup"
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = (r"^/?$", r"^/init\.scope$", r"^/user\.slice/.*")
    max_workloads: int = 200
    min_cpu_seconds: float = 0.0
    gpu_device_pattern: str = r"^/dev/nvidia(\d+)$"
    gpu_fds: bool = True
    numa_maps: bool = True
    sample_interval: float = 0.0

    def __post_init__(self) -> None:
        if not 0 <= self.sample_interval <= 3600:
            raise ConfigError(
                f"workload sample interval must be 0 to 3600 seconds, not {self.sample_interval}"
            )
        if self.mode not in ("cgroup", "process"):
            raise ConfigError(f"workload mode must be 'cgroup' or 'process', not {self.mode!r}")
        if self.max_workloads < 1:
            raise ConfigError("max_workloads must be at least 1")


@dataclass(frozen=True)
class PodOwnerSettings:
    """How the exporter lists its node's pods for their owner and QoS class (opt-in).

    ``kubeconfig`` is a kubeconfig file (``None``: the pod's service account), ``node_name``
    the node whose pods are listed, ``refresh_seconds`` how old the list may get.
    """

    node_name: str
    kubeconfig: str | None = None
    refresh_seconds: float = 60.0

    def __post_init__(self) -> None:
        if not self.refresh_seconds > 0:
            raise ConfigError("--kubernetes.refresh must be a positive number of seconds")


@dataclass(frozen=True)
class ExporterConfig:
    """Everything the exporter's collectors are built from.

    ``pod_resources_socket`` is the kubelet's pod-resources socket (``None``: its default
    path, used only where it exists); ``runtime_state`` the container runtimes' state
    directories on the host, read under ``paths.rootfs`` (empty: containerd's and CRI-O's
    defaults); ``pod_owners`` says how to read pod owners from the API server (``None``:
    not at all); ``dra_slices`` how to read the node's DRA ResourceSlices (``None``: not at
    all); ``slurm_gres_conf`` the gres.conf the ``slurm_gres`` collector checks.
    """

    paths: HostPaths = field(default_factory=HostPaths)
    hostname: str = ""
    workloads: WorkloadSettings = field(default_factory=WorkloadSettings)
    nvml: str = "auto"
    cross_socket_source: str = "auto"
    pcm_url: str | None = None
    pod_resources_socket: str | None = None
    runtime_state: tuple[str, ...] = ()
    pod_owners: PodOwnerSettings | None = None
    dra_slices: PodOwnerSettings | None = None
    slurm_gres_conf: str = DEFAULT_GRES_CONF
