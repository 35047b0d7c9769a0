"""Which RDMA NICs a workload uses: NCCL's ``NCCL_IB_HCA`` and the cgroup's RDMA accounting.

Two read-only sources, each validated before use:

- ``nccl_env``: ``NCCL_IB_HCA`` in ``/proc/PID/environ`` of the workload's processes (read
  up to :data:`ENVIRON_LIMIT` bytes, at most :data:`MAX_PIDS` processes per workload, the
  ones holding GPUs first). NCCL's rule (its environment variable documentation): a
  comma-separated list of HCA names, each optionally ``:port``; a leading ``^`` excludes the
  listed HCAs instead, a leading ``=`` makes every name an exact match (otherwise a name is a
  prefix: ``mlx5`` selects every ``mlx5_N``). A value that breaks that grammar, or is longer
  than :data:`MAX_VALUE`, is ignored: NCCL itself would not select from it what we would.
  Without the variable NCCL picks by itself, which we cannot tell, so no use is claimed.
- ``rdma_cgroup``: the RDMA controller's ``rdma.current`` of the workload's cgroup
  (``mlx5_0 hca_handle=2 hca_object=2000``): a device with handles charged is in use;
- ``uverbs``: the ``/dev/infiniband/uverbsN`` devices its processes hold open (at most
  :data:`MAX_FDS` descriptors of each), named through ``class/infiniband_verbs/uverbsN/ibdev``:
  the RDMA devices a rank has opened, which on Kubernetes are the ones its device plugin gave
  the container.

A source says which NICs a rank *may* use; NCCL then picks, for each of its GPUs, the nearest
of those (:func:`chosen`), so that NIC is the one reported, and it is far when a nearer NIC
exists that the source leaves out (``NCCL_IB_HCA`` naming only the other socket's HCA).
Each process's GPUs (from NVML) stand for its rank; where a process's GPUs are unknown, and
for the cgroup, the workload's GPUs stand in. Per workload and NIC the result is the
farthest use seen (:class:`NicUse`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from toposcope.host.cgroups import CgroupLayout
from toposcope.host.processes import read_all
from toposcope.topology.nic_locality import NicLocality, tier_rank

#: the most bytes of a process's environment read, and processes read per workload
ENVIRON_LIMIT = 256 * 1024
MAX_PIDS = 64
#: the longest NCCL_IB_HCA value taken, and the longest rdma.current file
MAX_VALUE = 4096
RDMA_CURRENT_LIMIT = 16 * 1024
#: the most file descriptors looked at per process for uverbs devices
MAX_FDS = 65_536
_UVERBS = re.compile(r"/dev/infiniband/uverbs([0-9]{1,4})")
_IBDEV = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
_KEY = b"NCCL_IB_HCA="
_ENTRY = re.compile(r"([A-Za-z0-9][A-Za-z0-9_.-]{0,63})(?::([0-9]{1,3}))?")
_RDMA_LINE = re.compile(r"([A-Za-z0-9][A-Za-z0-9_.-]{0,63})((?: [a-z_]+=(?:max|[0-9]{1,19}))*)")
_UNREADABLE = (FileNotFoundError, ProcessLookupError, PermissionError, NotADirectoryError)


@dataclass(frozen=True)
class NicUse:
    """A NIC a workload uses: by which sources, the tier from its users' GPUs, near or not."""

    nic: str
    sources: tuple[str, ...]
    link: str
    near: bool


def parse_nccl_ib_hca(value: str, nics: Sequence[str]) -> frozenset[str] | None:
    """The NICs among ``nics`` that ``NCCL_IB_HCA=value`` selects; ``None`` if malformed."""
    text = value.strip()
    if not text or len(text) > MAX_VALUE:
        return None
    exclude = text.startswith("^")
    text = text.removeprefix("^")
    exact = text.startswith("=")
    text = text.removeprefix("=")
    names: list[str] = []
    for entry in text.split(","):
        match = _ENTRY.fullmatch(entry.strip())
        if match is None:
            return None
        names.append(match.group(1))

    def listed(nic: str) -> bool:
        return any(nic == name if exact else nic.startswith(name) for name in names)

    return frozenset(nic for nic in nics if listed(nic) != exclude)


def nccl_ib_hca(environ: bytes) -> str | None:
    """The value of ``NCCL_IB_HCA`` in a ``/proc/PID/environ`` image, ``None`` without it."""
    for item in environ.split(b"\0"):
        if item.startswith(_KEY):
            return item[len(_KEY) :].decode("ascii", "replace")
    return None


def parse_rdma_current(text: str) -> frozenset[str]:
    """The devices of an ``rdma.current`` file with at least one handle or object charged."""
    used: set[str] = set()
    for line in text.splitlines():
        match = _RDMA_LINE.fullmatch(line.strip())
        if match is None:
            continue
        counts = dict(pair.split("=", 1) for pair in match.group(2).split())
        if any(value not in ("0", "max") for value in counts.values()):
            used.add(match.group(1))
    return frozenset(used)


class NicUseReader:
    """Reads which RDMA NICs each workload uses (see the module docstring)."""

    def __init__(
        self, procfs: str | os.PathLike[str], sysfs: str | os.PathLike[str] | None = None
    ) -> None:
        self._procfs = os.fspath(procfs)
        self._sysfs = os.fspath(sysfs) if sysfs is not None else None

    def uverbs_devices(self) -> dict[str, str]:
        """``/dev/infiniband/uverbsN`` -> its RDMA device name (``class/infiniband_verbs``)."""
        if self._sysfs is None:
            return {}
        base = os.path.join(self._sysfs, "class", "infiniband_verbs")
        try:
            names = [n for n in os.listdir(base) if _UVERBS.fullmatch(f"/dev/infiniband/{n}")]
        except (FileNotFoundError, NotADirectoryError, PermissionError):
            return {}
        found: dict[str, str] = {}
        for name in names[:1024]:
            try:
                ibdev = read_all(os.path.join(base, name, "ibdev"), 256).decode("ascii", "replace")
            except _UNREADABLE:
                continue
            if _IBDEV.fullmatch(ibdev.strip()):
                found[f"/dev/infiniband/{name}"] = ibdev.strip()
        return found

    def fd_nics(self, pid: int, devices: Mapping[str, str]) -> frozenset[str]:
        """The RDMA devices whose uverbs files ``pid`` holds open."""
        base = os.path.join(self._procfs, str(pid), "fd")
        try:
            names = os.listdir(base)[:MAX_FDS]
        except _UNREADABLE:
            return frozenset()
        found: set[str] = set()
        for name in names:
            try:
                target = os.readlink(os.path.join(base, name))
            except (*_UNREADABLE, OSError):
                continue
            if target in devices:
                found.add(devices[target])
        return frozenset(found)

    def environ_nics(self, pid: int, nics: Sequence[str]) -> frozenset[str] | None:
        """The NICs ``pid``'s ``NCCL_IB_HCA`` selects; ``None`` without a valid one."""
        try:
            data = read_all(os.path.join(self._procfs, str(pid), "environ"), ENVIRON_LIMIT)
        except _UNREADABLE:
            return None
        value = nccl_ib_hca(data)
        return None if value is None else parse_nccl_ib_hca(value, nics)

    def cgroup_nics(self, cgroup: str, layout: CgroupLayout | None) -> frozenset[str]:
        """The devices the cgroup's RDMA controller charges handles to."""
        hierarchy = layout.controller("rdma") if layout is not None else None
        directory = hierarchy.dir_of(cgroup) if hierarchy is not None else None
        if directory is None:
            return frozenset()
        try:
            data = read_all(directory + "/rdma.current", RDMA_CURRENT_LIMIT)
        except _UNREADABLE:
            return frozenset()
        return parse_rdma_current(data.decode("ascii", "replace"))

    def uses(
        self,
        locality: NicLocality,
        pids: Iterable[int],
        pid_gpus: Mapping[int, Iterable[int]],
        gpus: frozenset[int],
        cgroup: str,
        layout: CgroupLayout | None,
    ) -> list[NicUse]:
        """The NICs one workload uses, by NIC name (empty on a host without RDMA NICs)."""
        if not locality.nics:
            return []
        seen: dict[str, list[tuple[str, str, bool]]] = {}
        ordered = sorted(pids, key=lambda pid: (pid not in pid_gpus, pid))[:MAX_PIDS]
        devices = self.uverbs_devices()
        for pid in ordered:
            mine = frozenset(pid_gpus.get(pid, ())) or gpus
            allowed = self.environ_nics(pid, locality.nics)
            for nic, link, near in chosen(locality, mine, allowed or frozenset()):
                seen.setdefault(nic, []).append(("nccl_env", link, near))
            opened = self.fd_nics(pid, devices) if devices else frozenset()
            for nic, link, near in chosen(locality, mine, opened & set(locality.nics)):
                seen.setdefault(nic, []).append(("uverbs", link, near))
        charged = self.cgroup_nics(cgroup, layout) & set(locality.nics)
        for nic, link, near in chosen(locality, gpus, charged):
            seen.setdefault(nic, []).append(("rdma_cgroup", link, near))
        out: list[NicUse] = []
        for nic, judged in sorted(seen.items()):
            links = [link for _, link, _ in judged if link]
            out.append(
                NicUse(
                    nic,
                    tuple(sorted({source for source, _, _ in judged})),
                    max(links, key=tier_rank) if links else "",
                    all(near for _, _, near in judged),
                )
            )
        return out


def chosen(
    locality: NicLocality, gpus: frozenset[int], allowed: Iterable[str]
) -> list[tuple[str, str, bool]]:
    """The NICs NCCL would use for ``gpus`` among ``allowed``: for each GPU the nearest
    allowed NICs (NCCL prefers the nearest NIC it may use), with that tier and whether no NIC
    of the host is nearer. Without GPUs every allowed NIC counts, near (nothing to be far from).
    """
    allowed_set = frozenset(allowed)
    if not gpus:
        return [(nic, "", True) for nic in sorted(allowed_set)]
    picked: list[tuple[str, str, bool]] = []
    for gpu in sorted(gpus):
        tiers = {
            nic: locality.links[(gpu, nic)] for nic in allowed_set if (gpu, nic) in locality.links
        }
        if not tiers:
            continue
        best = min(tiers.values(), key=tier_rank)
        entry = locality.nearest.get(gpu)
        near = entry is None or tier_rank(best) <= tier_rank(entry[0])
        picked.extend((nic, best, near) for nic, tier in sorted(tiers.items()) if tier == best)
    return picked
