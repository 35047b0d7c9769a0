"""The dry-run examples in docs/advisor.md are what ``advise --dry-run`` prints today.

``demo`` blocks: the pin recommendation of ``toposcope sim`` (builtin:demo) for the
``vit-cross-socket.service`` workload, as ``toposcope advise --sim URL --workload
vit-cross-socket.service --format json`` reported it (tests/fixtures/advisor/
demo-pin-report.json), planned by each backend. ``fixture`` blocks: the report fixture with
its workloads renamed as Slurm jobs or pods, planned with no Slurm and no API server. Each
block in the document follows a ``<!-- dry-run: NAME -->`` marker; running this module prints
every block, to paste after a change.
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.helpers import FIXTURES
from toposcope.advisor.dry_run import planner_for, render_dry_run
from toposcope.report.decoder import report_from_json
from toposcope.rm.plan import PlanHints, WorkloadHints

DOC = Path(__file__).resolve().parents[2] / "docs" / "advisor.md"
DEMO = FIXTURES / "advisor" / "demo-pin-report.json"
REPORT = FIXTURES / "advisor" / "report.json"
#: a Slurm configuration whose controller does not answer (the cluster is not reachable)
GONE = "ClusterName=gone\nSlurmctldHost=localhost(127.0.0.1)\nSlurmctldPort=1\nMessageTimeout=1\n"
_BLOCK = re.compile(r"<!-- dry-run: (?P<name>[a-z-]+ [a-z-]+) -->\n```sh\n(?P<text>.*?)```", re.S)


@contextmanager
def offline() -> Iterator[None]:
    """No Slurm, no kubeconfig, named relatively so that the texts do not depend on the host."""
    saved, cwd = dict(os.environ), Path.cwd()
    with tempfile.TemporaryDirectory() as folder:
        Path(folder, "slurm.conf").write_text(GONE)
        os.chdir(folder)
        os.environ.update(SLURM_CONF="slurm.conf", KUBECONFIG="missing-kubeconfig", HOME=folder)
        os.environ.pop("KUBERNETES_SERVICE_HOST", None)
        try:
            yield
        finally:
            os.chdir(cwd)
            os.environ.clear()
            os.environ.update(saved)


def blocks() -> dict[str, str]:
    """Every example the document shows, by its marker's name."""
    found = {}
    with offline():
        demo = report_from_json(DEMO.read_text())
        for backend in ("agent", "systemd", "slurm", "kubernetes"):
            planner = planner_for(backend, None, {})
            found[f"demo {backend}"] = render_dry_run(demo, backend, planner, PlanHints())
        text = REPORT.read_text()
        jobs = report_from_json(
            text.replace("pending-c", "slurm-job-42").replace("job-b", "slurm-job-7")
        )
        pods = report_from_json(
            text.replace("pending-c", "ml/pending-c").replace("job-b", "ml/job-b")
        )
        hints = PlanHints(
            {
                "n1/train-a": WorkloadHints("ml", "train-a", "main"),
                "n8/notebook": WorkloadHints("ml", "notebook-0", "main"),
            }
        )
        found["fixture slurm"] = render_dry_run(
            jobs, "slurm", planner_for("slurm", None, {}), hints
        )
        kube = planner_for("kubernetes", None, {})
        found["fixture kubernetes"] = render_dry_run(pods, "kubernetes", kube, hints)
    return found


def test_the_documented_scripts_are_what_dry_run_prints() -> None:
    shown = {m.group("name"): m.group("text") for m in _BLOCK.finditer(DOC.read_text())}
    expected = blocks()
    assert sorted(shown) == sorted(expected)
    for name, text in expected.items():
        assert shown[name] == text, f"docs/advisor.md block {name!r} is stale:\n{text}"


if __name__ == "__main__":
    for name, text in blocks().items():
        print(f"<!-- dry-run: {name} -->\n```sh\n{text}```\n")
