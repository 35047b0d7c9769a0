"""``toposcope place``: the best GPU sets for a job of N GPUs, from the metrics.

    toposcope place --gpus N [--node NAME] (--prometheus URL | --scrape [NAME=]URL...)
        [--top 5] [--format table|json] [--fail-on no-placement]

Free GPUs are those up and held by no workload. Sets are ranked by worst link (NVLink >
same PCIe switch > same socket > across sockets), then link sum, then fragmentation, then NUMA
locality (a set on one NUMA node first), then GPU index (see docs/policies.md, gpu-placement;
the table's columns are explained under it and in ``--help``). Exit codes: 0 the ranking
was made (also when no node has N free GPUs: that is an answer, said on standard error, with
how many GPUs the node has free; an unknown ``--node`` is a usage error), 1 no node has N
free GPUs and ``--fail-on no-placement`` was given (for scripts that wait for room), 2 usage,
configuration or connection errors.
"""

from __future__ import annotations

import argparse
import json
import sys
import textwrap

from toposcope.advisor.cliargs import add_source_arguments, backend_from_args, selector
from toposcope.advisor.errors import AdvisorError
from toposcope.advisor.gpu_sets import Placement, place
from toposcope.advisor.loaders import PLACEMENT_QUERIES, Window, queries
from toposcope.advisor.model import ClusterModel
from toposcope.advisor.p2p_matrix import add_p2p_arguments, parse_options
from toposcope.advisor.runner import load_model
from toposcope.auth.tokens import add_token_file_options
from toposcope.errors import ConfigError, UsageError

#: what each column of the table means, under the table and in ``--help``
COLUMNS: tuple[tuple[str, str], ...] = (
    ("RANK", "1 is the best set; the order is FACTOR, then the columns from WORST LINK to NUMA"),
    (
        "WORST LINK",
        "the slowest link between two GPUs of the set: NV# (NVLink) > PIX, PXB (one PCIe "
        "switch) > PHB, NODE (one socket) > SYS (across sockets); - for one GPU",
    ),
    (
        "FACTOR",
        "step time of a communication-bound job on the set's dearest GPU pair, against two "
        "GPUs behind one PCIe Gen4 x16 switch = 1.00",
    ),
    (
        "PRICE",
        "what FACTOR rests on: topology (the pair's bandwidth from its NVLink count and "
        "generation, or its PCIe links and path), measured (a --p2p-bandwidth file), or tier "
        "(the link class alone: the GPU model and PCIe links are unknown)",
    ),
    ("GB/S", "the bandwidth each way the price rests on; - for a tier price or one GPU"),
    ("LINK SUM", "the ranks of all the set's GPU pairs added up: lower is better connected"),
    (
        "BROKEN",
        "fully free cells (a PCIe switch or NVLink island, a socket) the set breaks up; "
        "fewer keeps whole blocks for later jobs",
    ),
    ("STRANDED", "free GPUs the set leaves alone in the cells it takes GPUs from"),
    ("NUMA", "the NUMA nodes of the set's GPUs; among equal sets, fewer comes first"),
)


def legend(width: int = 88) -> str:
    """The columns explained, one wrapped entry each (:data:`COLUMNS`)."""
    indent = " " * (max(len(name) for name, _ in COLUMNS) + 2)
    return "\n".join(
        textwrap.fill(
            meaning, width, initial_indent=f"{name:<{len(indent)}}", subsequent_indent=indent
        )
        for name, meaning in COLUMNS
    )


EXAMPLES = """\
  toposcope place --gpus 2 --prometheus http://prometheus:9090
  toposcope place --gpus 4 --node gpu-01 --scrape gpu-01=http://gpu-01:9847/metrics
  toposcope place --gpus 8 --format json --fail-on no-placement --prometheus http://prom:9090\
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare ``--gpus``, ``--node``, ``--top``, ``--format`` and the metrics source."""
    parser.epilog = f"columns:\n{textwrap.indent(legend(), '  ')}\n\nExamples:\n{EXAMPLES}"
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("--gpus", type=int, required=True, metavar="N", help="GPUs wanted")
    parser.add_argument("--node", metavar="NAME", help="only this node")
    parser.add_argument("--top", type=int, default=5, help="placements to show (default 5)")
    parser.add_argument(
        "--format",
        choices=["table", "json"],
        default="table",
        help="table (default, with its columns explained under it) or json",
    )
    parser.add_argument(
        "--fail-on",
        choices=["no-placement"],
        help="exit 1 when no node has the GPUs free (default: exit 0 and say so)",
    )
    add_source_arguments(parser)
    add_p2p_arguments(parser)
    add_token_file_options(parser)


def _table(options: list[Placement], count: int) -> str:
    head = (
        "RANK",
        "NODE",
        "GPUS",
        "WORST LINK",
        "FACTOR",
        "PRICE",
        "GB/S",
        "LINK SUM",
        "BROKEN",
        "STRANDED",
        "NUMA",
    )
    rows = [
        (
            str(i + 1),
            p.node,
            ",".join(map(str, p.gpus)),
            str(p.worst_link) if p.worst_link else "-",
            f"{p.factor():.2f}",
            p.price.source if p.worst_link else "-",
            f"{p.price.gbps:.1f}" if p.price.gbps is not None else "-",
            str(p.link_sum),
            str(p.broken_cells),
            str(p.stranded),
            ",".join(map(str, p.numa_nodes)) or "-",
        )
        for i, p in enumerate(options)
    ]
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(head)]
    lines = [f"best placements for {count} GPU(s):", ""]
    lines.append("  ".join(h.ljust(w) for h, w in zip(head, widths, strict=True)).rstrip())
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    return "\n".join(lines) + "\n\n" + legend() + "\n"


def run(args: argparse.Namespace) -> int:
    """Rank placements and print them; 1 when nothing fits and ``--fail-on no-placement``."""
    try:
        if args.gpus < 1 or args.top < 1:
            raise UsageError("--gpus and --top must be at least 1")
        p2p = parse_options(args.p2p_bandwidth)
        backend = backend_from_args(args)
        model = load_model(
            backend,
            Window.parse("5m"),
            node_label=args.node_label,
            needs=queries(selector(args), PLACEMENT_QUERIES),
            p2p=p2p,
        )
        if args.node and args.node not in model.nodes:
            known = ", ".join(sorted(model.nodes)) or "none"
            raise UsageError(f"unknown node {args.node!r}: not in the metrics (known: {known})")
        options = place(model, args.gpus, args.node, top=args.top)
    except (UsageError, ConfigError, AdvisorError) as exc:
        print(f"toposcope place: error: {exc}", file=sys.stderr)
        return 2
    if args.format == "json":
        sys.stdout.write(json.dumps([p.to_dict() for p in options], indent=2) + "\n")
    elif options:
        sys.stdout.write(_table(options, args.gpus))
    if not options:
        print(f"toposcope place: {_no_room(model, args.gpus, args.node)}", file=sys.stderr)
        return 1 if args.fail_on == "no-placement" else 0
    return 0


def _no_room(model: ClusterModel, count: int, node: str | None) -> str:
    """Why no set of ``count`` GPUs was found: how many GPUs ``node`` (or the node with
    the most free ones) has, and how many of them are free.
    """
    names = [node] if node else sorted(model.nodes)
    if not names:
        return f"no {count} free GPU(s): the metrics name no node"
    free = {name: len(model.free_gpus(name)) for name in names}
    best = min(names, key=lambda name: (-free[name], name))
    gpus = len(model.nodes[best].gpus)
    held = f"{best} has {free[best]} of its {gpus} GPU(s) free"
    if node:
        return f"no {count} free GPU(s) on node {node}: {held}"
    return f"no {count} free GPU(s) on any node (the most: {held})"
