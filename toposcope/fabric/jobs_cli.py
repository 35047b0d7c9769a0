"""``toposcope fabric jobs``: how far each running multi-node job on Kubernetes is spread.

``toposcope fabric jobs SOURCE --pods FILE [--job-label KIND=KEY[,KEY]]... [--format
text|json]`` reads the fabric from any source of ``fabric show`` and the pods from ``kubectl
get pods -A -o json`` (or YAML) output, finds the multi-node jobs among them
(:mod:`toposcope.fabric.kube_jobs`) and prints each job's nodes, GPUs, domains spanned
against the fewest needed per level and the highest level crossed
(:mod:`toposcope.fabric.spread`). Slurm's multi-node jobs are published by ``toposcope slurm
exporter --fabric-...``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from toposcope.boundedread import read_bounded
from toposcope.errors import ConfigError
from toposcope.fabric.kube_jobs import DEFAULT_JOB_LABELS, job_placements, parse_job_label
from toposcope.fabric.model import level_name
from toposcope.fabric.sources import add_source_arguments, load_fabric
from toposcope.fabric.spread import FabricIndex, JobSpread

#: the largest pod list read
MAX_PODS_BYTES = 256 * 1024 * 1024


def add_jobs_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the ``jobs`` action's options on its parser."""
    add_source_arguments(parser)
    parser.add_argument(
        "--pods",
        metavar="FILE",
        required=True,
        help="the pods (kubectl get pods -A -o json or -o yaml output)",
    )
    parser.add_argument(
        "--job-label",
        action="append",
        metavar="KIND=KEY[,KEY]",
        help="pod label keys naming a job of KIND, in order of precedence (repeatable; "
        "default: " + "; ".join(f"{j.kind}={','.join(j.keys)}" for j in DEFAULT_JOB_LABELS) + ")",
    )
    parser.add_argument(
        "--format", choices=["text", "json"], default="text", help="text (default) or json"
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
    labels = (
        tuple(parse_job_label(text) for text in args.job_label)
        if args.job_label
        else DEFAULT_JOB_LABELS
    )
    index = FabricIndex(load_fabric(args))
    spreads = index.spreads(job_placements(read_pods(args.pods), labels))
    if args.format == "json":
        json.dump([spread_to_json(s) for s in spreads], sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        for spread in spreads:
            print(spread_to_text(spread))
    return 0
