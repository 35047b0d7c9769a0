"""Cores in the order Slurm and hwloc number them, from a topology's CPUs.

Slurm numbers a node's cores *logically*: socket by socket (sockets in the order of their
first CPU), each socket's cores in the order of their first CPU (``lstopo -l``'s ``Core L#``);
its abstract CPU ids (``scontrol show job -d``'s ``CPU_IDs``) count the threads of core 0,
then those of core 1, and so on. Linux numbers CPUs its own way (often every core's first
thread, then the second threads), so both the gres.conf writer (``Cores=``) and whoever reads
Slurm's CPU ids back into Linux ids need this one order.
"""

from __future__ import annotations

from toposcope.errors import ConfigError
from toposcope.topology.model import Topology


def ordered_cores(topology: Topology) -> list[tuple[int, ...]]:
    """Every core's CPU ids (ascending), cores in Slurm's logical order.

    Raises :class:`ConfigError` when a CPU's package or core is unknown, or there is no CPU.
    """
    cores: dict[tuple[int, int], list[int]] = {}
    for cpu in topology.cpus:
        if cpu.core is None or cpu.package is None:
            raise ConfigError(
                f"the topology from {topology.source or 'its source'} does not give CPU "
                f"{cpu.id}'s package and core, which Slurm's Cores= counts in"
            )
        cores.setdefault((cpu.package, cpu.core), []).append(cpu.id)
    if not cores:
        raise ConfigError(
            f"the topology from {topology.source or 'its source'} lists no CPUs with their "
            "cores: read sysfs (--path.sysfs, --root) or an hwloc XML file (--hwloc-xml)"
        )
    first_cpu_of_package: dict[int, int] = {}
    for (package, _), cpus in cores.items():
        first_cpu_of_package[package] = min(first_cpu_of_package.get(package, min(cpus)), *cpus)
    ordered = sorted(cores, key=lambda k: (first_cpu_of_package[k[0]], min(cores[k])))
    return [tuple(sorted(cores[key])) for key in ordered]


def slurm_cpu_order(topology: Topology) -> tuple[int, ...]:
    """Linux CPU id of each of Slurm's abstract CPU ids: ``result[abstract] == linux``."""
    return tuple(cpu for core in ordered_cores(topology) for cpu in core)
