"""``toposcope fabric jobs``: how far each running multi-node job on Kubernetes is spread.

``toposcope fabric jobs SOURCE (--pods FILE | --pods-from-api [--pods-namespace NS])
[--job-label KIND=KEY[,KEY]]... [--format text|json|prometheus]`` reads the fabric from any
source of ``fabric show`` and the pods from ``kubectl get pods -A -o json`` (or YAML) output
or the API server (:mod:`toposcope.fabric.kube_pods_api`), finds the multi-node jobs among them
(:mod:`toposcope.fabric.kube_jobs`) and prints each job's nodes, GPUs, domains spanned
against the fewest needed per level and the highest level crossed
(:mod:`toposcope.fabric.spread`); ``--format prometheus`` writes the catalogue's fabric and
per-job families instead, for node_exporter's textfile collector (write to a temporary file
and rename it, as that collector asks). Slurm's multi-node jobs are published by
``toposcope slurm exporter --fabric-...``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from prometheus_client.core import Metric

from toposcope.boundedread import read_bounded
from toposcope.catalogue import families_text
from toposcope.errors import ConfigError, UsageError
from toposcope.fabric.job_families import fabric_families, job_families
from toposcope.fabric.kube_jobs import DEFAULT_JOB_LABELS, job_placements, parse_job_label
from toposcope.fabric.model import level_name
from toposcope.fabric.sources import add_source_arguments, load_fabric
from toposcope.fabric.spread import FabricIndex, JobSpread

#: the largest pod list read
MAX_PODS_BYTES = 256 * 1024 * 1024


def add_jobs_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the ``jobs`` action's options on its parser."""
    add_source_arguments(parser)
    pods = parser.add_mutually_exclusive_group(required=True)
    pods.add_argument(
        "--pods", metavar="FILE", help="the pods (kubectl get pods -A -o json or -o yaml output)"
    )
    pods.add_argument(
        "--pods-from-api",
        action="store_true",
        help="list the running pods from the API server (the kubeconfig of --kubeconfig, "
        "$KUBECONFIG, the pod's service account or ~/.kube/config; RBAC: list pods)",
    )
    parser.add_argument(
        "--pods-namespace",
        metavar="NAMESPACE",
        help="with --pods-from-api: only this namespace's pods (default: all)",
    )
    parser.add_argument(
        "--job-label",
        action="append",
        metavar="KIND=KEY[,KEY]",
        help="pod label keys naming a job of KIND, in order of precedence (repeatable; "
        "default: " + "; ".join(f"{j.kind}={','.join(j.keys)}" for j in DEFAULT_JOB_LABELS) + ")",
    )
    parser.add_argument(
        "--format",
        choices=["text", "json", "prometheus"],
        default="text",
        help="text (default), json, or prometheus: the fabric and per-job families in the "
        "text exposition format (for node_exporter's textfile collector)",
    )


def read_pods(path: str | Path) -> list[Any]:
    """The pod objects of a file: a ``List``'s ``items``, a list, or one object."""
    raw = read_bounded(path, MAX_PODS_BYTES, str(path), what="a file of pods")
    text = raw.decode("utf-8", "replace")
    try:
        data = json.loads(text)
    except ValueError:
        import yaml  # noqa: PLC0415 (only for YAML pod lists: fabric show stays lean)

        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise ConfigError(f"{path}: neither JSON nor YAML: {exc}") from None
    if isinstance(data, dict) and isinstance(data.get("items"), list):
        return list(data["items"])
    if isinstance(data, list):
        return data
    if isinstance(data, dict):
        return [data]
    raise ConfigError(f"{path}: expected pod objects, a list of them or a List")


def _pods(args: argparse.Namespace) -> list[Any]:
    """The pods the options name: a file, or the API server's running pods."""
    if not args.pods_from_api:
        return read_pods(args.pods)
    from toposcope.fabric.kube_pods_api import list_running_pods  # noqa: PLC0415
    from toposcope.fabric.kubernetes_api import default_kubeconfig  # noqa: PLC0415
    from toposcope.kubeapi.client import connect  # noqa: PLC0415

    return list_running_pods(
        connect(args.kubeconfig or default_kubeconfig()), args.pods_namespace or None
    )


def exposition(metrics: list[Metric]) -> str:
    """``metrics`` in Prometheus' text exposition format."""
    return families_text(metrics).decode()


def spread_to_json(spread: JobSpread) -> dict[str, Any]:
    """One job's spread as JSON."""
    job = spread.job
    return {
        "scheduler": job.scheduler,
        "partition": job.partition,
        "workload": job.workload,
        "nodes": spread.nodes,
        "gpus": spread.gpus,
        "unknown_nodes": spread.unknown_nodes,
        "domains": dict(spread.domains),
        "domains_needed": dict(spread.needed),
        "top_level": spread.top_level,
        "top_level_needed": spread.top_level_needed,
        "rail_aligned": spread.rail_aligned,
    }


def spread_to_text(spread: JobSpread) -> str:
    """One line per job: nodes, GPUs, domains spanned/needed, level crossed/needed."""
    levels = " ".join(
        f"{level} {count}/{spread.needed.get(level, count)}"
        for level, count in spread.domains.items()
    )
    top = (
        f"crosses {level_name(spread.top_level)} (needs {level_name(spread.top_level_needed)})"
        if spread.top_level is not None and spread.top_level_needed is not None
        else "not on the fabric"
    )
    beyond = " SPREAD" if spread.spread_beyond_need else ""
    return (
        f"{spread.job.workload}: {spread.nodes} nodes, {spread.gpus} GPUs, "
        f"domains spanned/needed: {levels or '-'}, {top}{beyond}"
    )


def run_jobs(args: argparse.Namespace) -> int:
    """Print the spread of every multi-node job among the pods."""
    if args.pods_namespace and not args.pods_from_api:
        raise UsageError("--pods-namespace goes with --pods-from-api")
    labels = (
        tuple(parse_job_label(text) for text in args.job_label)
        if args.job_label
        else DEFAULT_JOB_LABELS
    )
    fabric = load_fabric(args)
    spreads = FabricIndex(fabric).spreads(job_placements(_pods(args), labels))
    if args.format == "prometheus":
        sys.stdout.write(exposition([*fabric_families(fabric), *job_families(spreads)]))
    elif args.format == "json":
        json.dump([spread_to_json(s) for s in spreads], sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        for spread in spreads:
            print(spread_to_text(spread))
    return 0
