"""Which node a series belongs to: the one naming rule of the advisor and the Dash app.

A series carries the labels of the scrape target it came from (``job``, ``instance``) and,
where the scrape configuration or the exporter adds one, a ``node`` label. Every exporter
also publishes ``toposcope_exporter_build_info`` with the ``hostname`` it runs on, which
names the machine behind a target whose ``instance`` is only an address. By default
(:data:`AUTO`) a series belongs to

1. its ``node`` label (the simulator's targets and the scraper's ``NAME=URL`` set it), else
2. the name of its scrape target: the ``node``, else the ``hostname``, of the build info of
   the same ``(job, instance)``, else
3. its ``instance`` (``local`` when it has none).

``node_label`` (``--node-label``) forces one label instead: a series belongs to that label,
else to that label on the build info of its ``(job, instance)`` (queries that aggregate
``by (job, instance)`` keep finding their node), else to ``unknown``.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterable, Mapping

#: the default rule (``node`` label, then the exporter's hostname, then ``instance``)
AUTO = "auto"
#: the node of a series without the forced label
UNKNOWN_NODE = "unknown"
#: the node of a series without any identifying label (a single local exporter)
LOCAL_NODE = "local"

#: a scrape target: ``(job, instance)``
Target = tuple[str, str]

_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")


def check_node_label(text: str) -> str:
    """``text`` when it is :data:`AUTO` or a Prometheus label name; ``ValueError`` naming
    what is wrong otherwise.
    """
    if text == AUTO or (_LABEL_NAME.fullmatch(text) and not text.startswith("__")):
        return text
    raise ValueError(
        f"node label {text!r} is neither {AUTO!r} nor a label name (letters, digits and "
        "_, not starting with a digit or __)"
    )


def add_node_label_argument(parser: argparse.ArgumentParser) -> None:
    """Declare ``--node-label`` (checked while parsing: a bad name is a usage error)."""

    def node_label(text: str) -> str:
        try:
            return check_node_label(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    parser.add_argument(
        "--node-label",
        default=AUTO,
        type=node_label,
        metavar="LABEL",
        help=f"label naming a series' node (default {AUTO}: node, then the exporter's "
        "hostname, then instance)",
    )


def target_of(labels: Mapping[str, str]) -> Target:
    """The ``(job, instance)`` scrape target a series with ``labels`` came from."""
    return labels.get("job", ""), labels.get("instance", "")


class NodeNamer:
    """Names the node of any series from its labels (see the module docstring).

    ``build_info`` are the label sets of ``toposcope_exporter_build_info``, one per exporter;
    ``node_label`` is :data:`AUTO` or the label to use instead.
    """

    def __init__(self, build_info: Iterable[Mapping[str, str]], node_label: str = AUTO) -> None:
        self.node_label = check_node_label(node_label)
        infos = list(build_info)
        self._own: dict[Target, str] = {}
        for labels in infos:
            own = self._own_name(labels)
            if own:
                self._own[target_of(labels)] = own
        self._targets = {target_of(labels): self(labels) for labels in infos}

    def _own_name(self, labels: Mapping[str, str]) -> str:
        """The name an exporter's build info gives its own target ('' when none)."""
        if self.node_label != AUTO:
            return labels.get(self.node_label, "")
        return labels.get("node", "") or labels.get("hostname", "")

    def __call__(self, labels: Mapping[str, str]) -> str:
        """The node a series with ``labels`` belongs to."""
        if self.node_label != AUTO:
            return (
                labels.get(self.node_label, "")
                or self._own.get(target_of(labels), "")
                or UNKNOWN_NODE
            )
        return (
            labels.get("node", "")
            or self._own.get(target_of(labels), "")
            or labels.get("instance", "")
            or LOCAL_NODE
        )

    @property
    def nodes(self) -> list[str]:
        """The nodes of every exporter that published build info, sorted."""
        return sorted(set(self._targets.values()))

    def targets(self, node: str) -> list[Target]:
        """The ``(job, instance)`` scrape targets whose exporter runs on ``node``, sorted."""
        return sorted(t for t, name in self._targets.items() if name == node)
