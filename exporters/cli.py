"""``toposcope exporter``: serve /metrics for this host (or a snapshot), or print one scrape.

Flags follow node_exporter where they mean the same (``--path.sysfs``, ``--path.procfs``,
``--path.rootfs``, ``--collector.NAME`` / ``--no-collector.NAME``); ``--root DIR`` sets all
three for a snapshot tree holding ``sys/`` and ``proc/``.
"""

from __future__ import annotations

import argparse
import logging
import os
import socket
import sys

from toposcope.config import ExporterConfig, HostPaths, PodOwnerSettings, WorkloadSettings
from toposcope.errors import UsageError
from toposcope.exporters import DEFAULT_PORT
from toposcope.exporters.app import ExporterServer, build_runner, render
from toposcope.exporters.collectors import default_table
from toposcope.exporters.context import CollectorContext
from toposcope.exporters.gpu_source import NVML_MODES_HELP, attach_gpu_source, close_gpu_source
from toposcope.exporters.heap import tune_for_serving
from toposcope.exporters.kubelet_attach import attach_kubelet, close_kubelet
from toposcope.exporters.nrt_publisher import add_nrt_arguments, nrt_settings, open_publisher
from toposcope.exporters.runner import ScrapeRunner
from toposcope.host.podresources.options import add_pod_naming_arguments
from toposcope.serving.webflags import add_web_arguments, apply_web_arguments
from toposcope.topology.gresconf_file import DEFAULT_GRES_CONF

LOG = logging.getLogger("toposcope.exporter")

#: seconds between two background samples of the workloads
#: (``--collector.workloads.sample-interval``): Prometheus's usual scrape interval, so that
#: the exporter reads the workloads about as often as it did when every scrape read them
#: (no more CPU an hour than then, docs/benchmarks.md) and each scrape sees a fresh sample
DEFAULT_SAMPLE_INTERVAL = 15.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the exporter's options, including one on/off flag pair per collector."""
    add_web_arguments(
        parser,
        f":{DEFAULT_PORT}",
        f"address to serve /metrics on (default :{DEFAULT_PORT}, all interfaces)",
    )
    parser.add_argument("--root", metavar="DIR", help="snapshot root holding sys/ and proc/")
    parser.add_argument("--path.sysfs", dest="path_sysfs", metavar="DIR", help="sysfs mount")
    parser.add_argument("--path.procfs", dest="path_procfs", metavar="DIR", help="procfs mount")
    parser.add_argument(
        "--path.rootfs", dest="path_rootfs", metavar="DIR", help="root for cgroup/resctrl mounts"
    )
    parser.add_argument(
        "--collectors",
        metavar="LIST",
        help="comma-separated collectors to run instead of the defaults",
    )
    table = default_table()
    for entry in table:
        state = "on" if entry.default_enabled else "off"
        parser.add_argument(
            f"--collector.{entry.name}",
            dest="enable",
            action="append_const",
            const=entry.name,
            help=f"enable {entry.name}: {entry.description} (default {state})",
        )
        parser.add_argument(
            f"--no-collector.{entry.name}",
            dest="disable",
            action="append_const",
            const=entry.name,
            help=argparse.SUPPRESS,
        )
    parser.add_argument("--print", action="store_true", help="print one scrape and exit")
    parser.add_argument(
        "--hostname",
        default="",
        help="hostname to report (default: $NODE_NAME, as dcgm-exporter, else this host's name)",
    )
    parser.add_argument(
        "--nvml",
        default="auto",
        metavar="MODE",
        help=f"GPU backend: {NVML_MODES_HELP} (default auto: real NVML when it loads)",
    )
    parser.add_argument(
        "--cross-socket-source",
        default="auto",
        choices=["auto", "uncore", "resctrl", "pcm", "estimate", "off"],
        help="where inter-socket traffic comes from (default: best available)",
    )
    parser.add_argument("--pcm-url", metavar="URL", help="Intel pcm-sensor-server endpoint")
    parser.add_argument(
        "--workloads.mode",
        dest="workloads_mode",
        default="cgroup",
        choices=["cgroup", "process"],
        help="a workload is a cgroup with processes, or a top-level process tree",
    )
    parser.add_argument(
        "--workloads.max",
        dest="workloads_max",
        type=int,
        default=WorkloadSettings.max_workloads,
        help="most workloads exported (the rest are counted as dropped)",
    )
    parser.add_argument(
        "--collector.workloads.sample-interval",
        dest="workloads_sample_interval",
        type=float,
        default=DEFAULT_SAMPLE_INTERVAL,
        metavar="SECONDS",
        help="how often a background thread reads every workload's threads, memory and "
        "descriptors; scrapes serve the last sample and its age "
        f"(default {DEFAULT_SAMPLE_INTERVAL:g}; 0 reads them in every scrape)",
    )
    parser.add_argument(
        "--workloads.include",
        dest="workloads_include",
        action="append",
        default=[],
        metavar="REGEX",
        help="only cgroups (or commands) matching; repeatable",
    )
    add_pod_naming_arguments(parser)
    parser.add_argument(
        "--kubernetes.pod-owners",
        dest="pod_owners",
        action="store_true",
        help="list this node's pods from the API server for owner_kind, owner_name and "
        "qos_class on toposcope_workload_info (needs pods list, replicasets get)",
    )
    parser.add_argument(
        "--kubernetes.dra-slices",
        dest="dra_slices",
        action="store_true",
        help="read this node's DRA ResourceSlices from the API server to resolve the devices "
        "of ResourceClaims to GPUs, PCIe roots and NUMA nodes (needs resourceslices list)",
    )
    parser.add_argument(
        "--kubernetes.kubeconfig",
        dest="kubeconfig",
        metavar="PATH",
        help="kubeconfig for --kubernetes.pod-owners/--kubernetes.dra-slices (default: the "
        "pod's service account)",
    )
    parser.add_argument(
        "--kubernetes.node-name",
        dest="kube_node_name",
        metavar="NAME",
        help="node whose pods are listed (default $NODE_NAME, else --hostname)",
    )
    parser.add_argument(
        "--kubernetes.refresh",
        dest="kube_refresh",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="how often the pod list is read again (default 60)",
    )
    parser.add_argument(
        "--workloads.exclude",
        dest="workloads_exclude",
        action="append",
        default=None,
        metavar="REGEX",
        help="skip cgroups (or commands) matching; repeatable (replaces the defaults)",
    )
    parser.add_argument(
        "--slurm.gres-conf",
        dest="slurm_gres_conf",
        default=DEFAULT_GRES_CONF,
        metavar="PATH",
        help=f"Slurm gres.conf the slurm_gres collector checks (default {DEFAULT_GRES_CONF})",
    )
    add_nrt_arguments(parser)


def config_from_args(args: argparse.Namespace) -> ExporterConfig:
    """Turn parsed arguments into an :class:`ExporterConfig` (validated)."""
    if args.root:
        paths = HostPaths.under(args.root)
    else:
        paths = HostPaths.from_options(args.path_rootfs, args.path_sysfs, args.path_procfs)
    paths.check()
    exclude = (
        tuple(args.workloads_exclude)
        if args.workloads_exclude is not None
        else WorkloadSettings.exclude
    )
    workloads = WorkloadSettings(
        mode=args.workloads_mode,
        include=tuple(args.workloads_include),
        exclude=exclude,
        max_workloads=args.workloads_max,
        sample_interval=args.workloads_sample_interval,
    )
    hostname = default_hostname(args.hostname)
    return ExporterConfig(
        paths=paths,
        hostname=hostname,
        workloads=workloads,
        nvml=args.nvml,
        cross_socket_source=args.cross_socket_source,
        pcm_url=args.pcm_url,
        pod_resources_socket=args.pod_resources_socket,
        runtime_state=tuple(args.runtime_state),
        pod_owners=_pod_owners(args, hostname),
        dra_slices=_dra_slices(args, hostname),
        slurm_gres_conf=args.slurm_gres_conf,
    )


def default_hostname(given: str = "") -> str:
    """The hostname to report: ``given``, else ``$NODE_NAME`` (the Kubernetes node, which a
    DaemonSet passes down as dcgm-exporter's does), else this host's name.
    """
    return given or os.environ.get("NODE_NAME", "").strip() or socket.gethostname()


def _pod_owners(args: argparse.Namespace, hostname: str) -> PodOwnerSettings | None:
    """``--kubernetes.*`` as settings; ``None`` without ``--kubernetes.pod-owners``."""
    if not args.pod_owners:
        if (args.kubeconfig or args.kube_node_name) and not (args.publish_nrt or args.dra_slices):
            raise UsageError(
                "--kubernetes.kubeconfig/--kubernetes.node-name need --kubernetes.pod-owners, "
                "--kubernetes.dra-slices or --kubernetes.publish-nrt"
            )
        return None
    node = args.kube_node_name or os.environ.get("NODE_NAME") or hostname
    return PodOwnerSettings(node, args.kubeconfig, args.kube_refresh)


def _dra_slices(args: argparse.Namespace, hostname: str) -> PodOwnerSettings | None:
    """``--kubernetes.*`` for the ResourceSlices; ``None`` without ``--kubernetes.dra-slices``."""
    if not args.dra_slices:
        return None
    node = args.kube_node_name or os.environ.get("NODE_NAME") or hostname
    return PodOwnerSettings(node, args.kubeconfig, args.kube_refresh)


def run(args: argparse.Namespace) -> int:
    """Print one scrape, or serve until SIGINT/SIGTERM."""
    config = config_from_args(args)
    table = default_table()
    only = [n.strip() for n in args.collectors.split(",") if n.strip()] if args.collectors else None
    entries = table.select(only, args.enable or (), args.disable or ())
    context = CollectorContext(config)
    attach_kubelet(context)
    attach_gpu_source(context)
    try:
        nrt = nrt_settings(args, config.hostname)
        publisher = open_publisher(nrt, context) if nrt is not None else None
        runner = build_runner(config, entries, context)
        if args.print:
            if publisher is not None:
                publisher.publish_once()
            sys.stdout.write(render(runner, config.hostname).decode())
            return 0
        if publisher is not None:
            context.background.append(publisher)
        tune_for_serving()
        context.start_background()
        return _serve(runner, config.hostname, args)
    finally:
        context.stop_background()
        close_kubelet(context)
        close_gpu_source(context)


def _serve(runner: ScrapeRunner, hostname: str, args: argparse.Namespace) -> int:
    server = ExporterServer(runner, hostname, args.listen)
    web = apply_web_arguments(server, args)
    LOG.info(
        "serving /metrics on %s (port %d, %s) with collectors %s",
        ", ".join([args.listen, *(args.listen_also or [])]),
        server.port,
        "TLS" if web is not None and web.tls else "plain HTTP",
        ",".join(runner.names()),
    )
    server.serve_until_signalled()
    return 0
