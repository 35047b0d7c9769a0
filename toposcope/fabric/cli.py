"""``toposcope fabric``: the network between nodes.

* ``toposcope fabric show (--slurm-topology FILE | --ibnetdiscover FILE | --file FILE |
  --kubernetes-nodes FILE --kueue-topology FILE | --kubernetes) [--format text|json]`` prints
  the switch tree, the nodes per leaf with each leaf's oversubscription where known, the
  blocks and block sizes, and the rails (which leaves each NIC reaches). A malformed input
  exits 2 naming its ``file:line``.
* ``toposcope fabric jobs SOURCE --pods FILE`` prints how far each running multi-node job on
  Kubernetes is spread over the fabric (:mod:`toposcope.fabric.jobs_cli`).
"""

from __future__ import annotations

import argparse
import json
import sys

from toposcope.errors import UsageError
from toposcope.fabric.jobs_cli import add_jobs_arguments, run_jobs
from toposcope.fabric.sources import add_source_arguments, load_fabric


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the ``show`` and ``jobs`` actions and their options."""
    actions = parser.add_subparsers(dest="fabric_action", metavar="ACTION")
    show = actions.add_parser(
        "show",
        help="print the switch tree, nodes per leaf, blocks, rails and oversubscription",
        description="Read the cluster's network fabric from one source and print its switch\n"
        "tree (leaf, spine, core), the nodes under each leaf with its oversubscription where\n"
        "the bandwidth is known, the blocks with their block sizes, and the rails (which\n"
        "leaves each NIC reaches). Exit 2 on a malformed input, naming file:line.",
    )
    add_source_arguments(show)
    show.add_argument(
        "--format",
        choices=["text", "json"],
        default="text",
        help="text (default: the tree and tables) or json (switches, blocks, nodes)",
    )
    jobs = actions.add_parser(
        "jobs",
        help="print how far each running multi-node job on Kubernetes is spread",
        description="Read the fabric from one source and the pods from a file, find the\n"
        "multi-node jobs (JobSet, LeaderWorkerSet, PyTorchJob, Kueue pod groups) and print\n"
        "each one's nodes, GPUs, fabric domains spanned against the fewest needed, and the\n"
        "highest level it crosses. Exit 2 on a malformed input.",
    )
    add_jobs_arguments(jobs)


def run(args: argparse.Namespace) -> int:
    """Carry out the chosen action; exit 2 on bad input."""
    if args.fabric_action == "jobs":
        return run_jobs(args)
    if args.fabric_action != "show":
        raise UsageError("choose an action: toposcope fabric show | jobs (see --help)")
    fabric = load_fabric(args)
    if args.format == "json":
        from toposcope.fabric.jsonform import fabric_to_json  # noqa: PLC0415

        json.dump(fabric_to_json(fabric), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        from toposcope.fabric.text import fabric_to_text  # noqa: PLC0415

        print(fabric_to_text(fabric))
    return 0
