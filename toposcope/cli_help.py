"""What every ``toposcope ... --help`` ends with: an "Examples:" section per (sub)command.

Held here, as text, so that the top-level CLI can finish each subcommand's help the same
way (a description, the examples as written) without importing anything more than the
subcommand's own module. :func:`finish_help` is called by :mod:`toposcope.cli` once a
subcommand has declared its options.
"""

from __future__ import annotations

import argparse

#: command path ("" for ``toposcope`` itself) -> example command lines
EXAMPLES: dict[str, tuple[str, ...]] = {
    "": (
        "toposcope topology",
        "toposcope exporter --web.listen-address :9847",
        "toposcope advise --prometheus http://prometheus:9090",
        "toposcope advise --list-policies | head -3",
    ),
    "topology": (
        "toposcope topology",
        "toposcope topology --format json --nvml off",
        "nvidia-smi topo -m | toposcope topology --nvidia-smi-topo -",
    ),
    "fabric": (
        "toposcope fabric show --slurm-topology /etc/slurm/topology.conf",
        "toposcope fabric show --ibnetdiscover ibnetdiscover.out --format json",
    ),
    "fabric show": (
        "toposcope fabric show --slurm-topology /etc/slurm/topology.conf",
        "toposcope fabric show --ibnetdiscover ibnetdiscover.out --format json",
        "toposcope fabric show --file fabric.yaml",
        "toposcope fabric show --kubernetes-nodes nodes.yaml --kueue-topology topology.yaml",
        "toposcope fabric show --kubernetes --kueue-topology-name default",
    ),
    "fabric jobs": (
        "toposcope fabric jobs --kubernetes --pods pods.json",
        "toposcope fabric jobs --slurm-topology topology.conf --pods pods.json --format json",
    ),
    "exporter": (
        "toposcope exporter",
        "toposcope exporter --web.listen-address :9847 --web.config.file web.yml",
        "toposcope exporter --print --collectors topology,numa_memory",
    ),
    "advise": (
        "toposcope advise --prometheus http://prometheus:9090 --window 1h",
        "toposcope advise --prometheus http://prometheus:9090 --format json --fail-on high",
        "toposcope advise --scrape gpu-01=http://gpu-01:9847/metrics --dry-run",
        "toposcope advise --prometheus http://prometheus:9090 --apply --resource-manager sim \\\n"
        "    --rm-url http://127.0.0.1:9850/api/v1 --rm-token-file sim.token",
    ),
    "advise revert": (
        "toposcope advise revert pin-0123abcd --resource-manager sim \\\n"
        "    --rm-url http://127.0.0.1:9850/api/v1 --rm-token-file sim.token",
        "toposcope advise revert pin-0123abcd --resource-manager local",
    ),
    "advise log": (
        "toposcope advise log",
        "toposcope advise log --recommendation pin-0123abcd --audit-db audit.sqlite",
    ),
    "place": (
        "toposcope place --gpus 2 --prometheus http://prometheus:9090",
        "toposcope place --gpus 4 --node gpu-01 --scrape gpu-01=http://gpu-01:9847/metrics",
    ),
    "sim": (
        "toposcope sim",
        "toposcope sim --scenario builtin:dgx-misplaced --speed 0 --token-file sim.token",
        "toposcope sim --scenario my-cluster.yaml --file-sd targets.json",
    ),
    "agent": (
        "toposcope agent --token-file /etc/toposcope/agent.token",
        "toposcope agent --web.listen-address :9848 --web.config.file agent-web.yml \\\n"
        "    --auth.kubernetes-tokenreview",
    ),
    "advisor": ("toposcope advisor serve --prometheus http://prometheus:9090",),
    "advisor serve": (
        "toposcope advisor serve --prometheus http://prometheus:9090",
        "toposcope advisor serve --prometheus http://prometheus:9090 \\\n"
        "    --api-token-file advisor.token --resource-manager sim \\\n"
        "    --rm-url http://127.0.0.1:9850/api/v1 --rm-token-file sim.token",
    ),
    "dash": (
        "toposcope dash --prometheus http://prometheus:9090",
        "toposcope dash --prometheus http://prometheus:9090 --advisor http://127.0.0.1:9849 \\\n"
        "    --advisor-token-file advisor.token",
    ),
    "docs": ("toposcope docs metrics --output docs/metrics.md",),
    "rules": ("toposcope rules export alerts-out",),
    "rules export": (
        "toposcope rules export alerts-out",
        "toposcope rules export --config rules.yaml --format prometheusrule k8s-out",
        "toposcope rules export --check alerts",
    ),
    "dashboards": ("toposcope dashboards export grafana-out",),
    "dashboards export": (
        "toposcope dashboards export grafana-out",
        "toposcope dashboards export --check dashboards/grafana/json",
    ),
    "slurm": (
        "toposcope slurm show --slurm-url http://slurmrestd:6820 --slurm-token-file slurm.jwt",
        "toposcope slurm gres-conf --node gpu-01",
    ),
    "slurm gres-conf": (
        "toposcope slurm gres-conf --node gpu-01",
        "toposcope slurm gres-conf --hwloc-xml gpu-01.xml --node gpu-01 --type a100",
    ),
    "slurm topology-conf": (
        "toposcope slurm topology-conf --slurm-topology /etc/slurm/topology.conf",
        "toposcope slurm topology-conf --ibnetdiscover ibnetdiscover.out",
        "toposcope slurm topology-conf --file fabric.yaml",
    ),
    "slurm show": (
        "toposcope slurm show --slurm-url http://slurmrestd:6820 --slurm-token-file slurm.jwt",
        "toposcope slurm show --format json --slurm-url http://slurmrestd:6820 \\\n"
        "    --slurm-token-file slurm.jwt",
    ),
    "slurm exporter": (
        "toposcope slurm exporter --slurm-url http://slurmrestd:6820 --slurm-token-file slurm.jwt",
        "toposcope slurm exporter --print --slurm-url http://slurmrestd:6820 \\\n"
        "    --slurm-token-file slurm.jwt",
    ),
    "kube": ("toposcope kube webhook --web.config.file webhook-web.yml",),
    "kube webhook": (
        "toposcope kube webhook --web.config.file webhook-web.yml",
        "toposcope kube webhook --web.listen-address :9443 --web.config.file webhook-web.yml",
    ),
    "kube claim-advice": (
        "toposcope kube claim-advice --pod research/llm-train-7d9f8-x2k4q",
        "toposcope kube claim-advice --prometheus http://prometheus:9090 --format json",
    ),
}


def examples_epilog(path: str) -> str:
    """The "Examples:" section of the command ``path`` ("" for ``toposcope`` itself)."""
    lines = "\n".join(f"  {line}" for example in EXAMPLES[path] for line in example.split("\n"))
    return f"Examples:\n{lines}"


def finish_help(parser: argparse.ArgumentParser, path: str) -> None:
    """Give ``parser`` (the command ``path``) and its sub-actions, recursively, a
    description (their one-line help where they have none) and their examples, laid out as
    written. An epilog that already has its examples (``toposcope place``) is kept.
    """
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    if not parser.epilog or "Examples:" not in parser.epilog:
        epilog = examples_epilog(path)
        parser.epilog = f"{parser.epilog}\n\n{epilog}" if parser.epilog else epilog
    for action in parser._actions:
        if not isinstance(action, argparse._SubParsersAction):
            continue
        helps = {choice.dest: choice.help for choice in action._choices_actions}
        for name, sub in action.choices.items():
            if not sub.description:
                sub.description = helps.get(name)
            finish_help(sub, f"{path} {name}".strip())
