"""``--kubernetes.publish-nrt``: the exporter keeps its node's NodeResourceTopology up to date.

Opt-in. Every ``--kubernetes.nrt-interval`` seconds (and once at start) the publisher reads
the host topology (sysfs, shared with the collectors), the kubelet's pod-resources answer,
the kubelet's Topology Manager settings (``/configz`` through the API server, or
``--kubernetes.kubelet-config FILE``) and the Node's uid, builds the object
(:mod:`toposcope.exporters.nrt.builder`) and writes it
(:mod:`toposcope.exporters.nrt.writer`). Anything that fails is logged (once, and
once more when it works again) and tried again on the next round; the exporter goes on
serving. The modules that need ``xxhash`` (the ``kubernetes`` extra) are imported only here,
when the flag is given.
"""

from __future__ import annotations

import argparse
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from toposcope.background import BackgroundLoop
from toposcope.errors import ConfigError, SourceError, UsageError
from toposcope.exporters.context import CollectorContext
from toposcope.identity.names import is_node_name
from toposcope.kubeapi.client import connect

if TYPE_CHECKING:
    from toposcope.exporters.nrt.kubeletconfig import TopologyManagerConfig
    from toposcope.exporters.nrt.writer import NrtWriter, Outcome
    from toposcope.kubeapi.client import KubeApi

LOG = logging.getLogger("toposcope.exporter.nrt")
DEFAULT_INTERVAL = 60.0


@dataclass(frozen=True)
class NrtSettings:
    """What ``--kubernetes.publish-nrt`` and its companion flags ask for."""

    node_name: str
    kubeconfig: str | None = None
    kubelet_config: Path | None = None
    interval: float = DEFAULT_INTERVAL

    def __post_init__(self) -> None:
        if not is_node_name(self.node_name):
            raise ConfigError(f"node name {self.node_name[:80]!r} is not a valid node name")
        if not self.interval >= 1:
            raise ConfigError("--kubernetes.nrt-interval must be at least 1 second")


def add_nrt_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare ``--kubernetes.publish-nrt`` and its companions on the exporter's parser."""
    parser.add_argument(
        "--kubernetes.publish-nrt",
        "--publish-nrt",
        dest="publish_nrt",
        action="store_true",
        help="write this node's NodeResourceTopology (topology.node.k8s.io/v1alpha2) for "
        "topology-aware scheduling; needs the kubelet's pod-resources socket and RBAC "
        "(deploy/kubernetes/components/publish-nrt)",
    )
    parser.add_argument(
        "--kubernetes.nrt-interval",
        dest="nrt_interval",
        type=float,
        default=DEFAULT_INTERVAL,
        metavar="SECONDS",
        help=f"how often the NodeResourceTopology is rebuilt (default {DEFAULT_INTERVAL:.0f})",
    )
    parser.add_argument(
        "--kubernetes.kubelet-config",
        dest="kubelet_config",
        metavar="FILE",
        help="read the Topology Manager settings from the kubelet's configuration file "
        "instead of its /configz endpoint (right only when the kubelet takes no "
        "--topology-manager-* flags)",
    )


def nrt_settings(args: argparse.Namespace, hostname: str) -> NrtSettings | None:
    """The publishing settings from parsed arguments; ``None`` without the flag."""
    if not args.publish_nrt:
        if args.kubelet_config:
            raise UsageError("--kubernetes.kubelet-config needs --kubernetes.publish-nrt")
        return None
    node = args.kube_node_name or os.environ.get("NODE_NAME") or hostname
    config = Path(args.kubelet_config) if args.kubelet_config else None
    return NrtSettings(node, args.kubeconfig, config, args.nrt_interval)


class NrtPublisher(BackgroundLoop):
    """Publishes the node's NodeResourceTopology now and then (module docstring).

    :meth:`start` and :meth:`stop` make it one of the exporter's background threads.
    """

    name = "nrt-publisher"

    def __init__(self, settings: NrtSettings, context: CollectorContext, api: KubeApi) -> None:
        from toposcope.exporters.nrt.writer import NrtWriter  # noqa: PLC0415

        super().__init__()
        self.settings = settings
        self.context = context
        self.api = api
        self.writer: NrtWriter = NrtWriter(api)
        self._last_problem = ""

    def publish_once(self) -> Outcome | None:
        """One round: build and write; ``None`` when it could not (the log says why)."""
        from toposcope.exporters.nrt.builder import (  # noqa: PLC0415
            NodeRef,
            NotMeasured,
            build_nrt,
        )

        kubelet = self.context.kubelet
        answer = kubelet.answer() if kubelet is not None else None
        if answer is None:
            reason = kubelet.reason if kubelet is not None else "no kubelet source"
            return self._problem(f"no pod-resources answer from the kubelet ({reason})")
        try:
            node = NodeRef(self.settings.node_name, self.writer.node_uid(self.settings.node_name))
            built = build_nrt(self.context.topology.get(), answer, self._kubelet_config(), node)
            outcome = self.writer.write(built.body)
        except (ConfigError, SourceError, NotMeasured) as exc:
            return self._problem(str(exc))
        if outcome == "refused":
            return self._problem(self.writer.refusal, outcome)
        if self._last_problem or outcome != "unchanged":
            LOG.info(
                "NodeResourceTopology %s %s%s",
                node.name,
                outcome,
                f" (left out: {'; '.join(built.notes)})" if built.notes else "",
            )
        self._last_problem = ""
        return outcome

    def _kubelet_config(self) -> TopologyManagerConfig:
        from toposcope.exporters.nrt.kubeletconfig import (  # noqa: PLC0415
            read_config_file,
            read_configz,
        )

        if self.settings.kubelet_config is not None:
            return read_config_file(self.settings.kubelet_config)
        return read_configz(self.api, self.settings.node_name)

    def _problem(self, message: str, outcome: Outcome | None = None) -> Outcome | None:
        if message != self._last_problem:
            LOG.warning(
                "NodeResourceTopology not written: %s; trying again every %.0f s",
                message,
                self.settings.interval,
            )
            self._last_problem = message
        return outcome

    def _run(self) -> None:
        while not self._stop.is_set():
            self.publish_once()
            self._stop.wait(self.settings.interval)


def open_publisher(settings: NrtSettings, context: CollectorContext) -> NrtPublisher:
    """The publisher for ``settings``; :class:`ConfigError` when it cannot work at all.

    Needs the kubelet's pod-resources API (the context attached to it), the ``kubernetes``
    extra (``xxhash``) and a reachable API-server configuration.
    """
    kubelet = context.kubelet
    if kubelet is None or not kubelet.enabled:
        reason = kubelet.reason if kubelet is not None else "not attached"
        raise ConfigError(
            f"--kubernetes.publish-nrt needs the kubelet's pod-resources API: {reason}"
        )
    try:
        import xxhash  # noqa: F401, PLC0415
    except ImportError:
        raise ConfigError(
            "--kubernetes.publish-nrt needs the 'kubernetes' extra (xxhash): "
            "pip install 'toposcope[kubernetes]'"
        ) from None
    api = connect(settings.kubeconfig)
    LOG.info(
        "publishing node %s's NodeResourceTopology at %s every %.0f s",
        settings.node_name,
        api.url,
        settings.interval,
    )
    return NrtPublisher(settings, context, api)
