"""One run of the real ``toposcope advise --apply`` in a subprocess, as each round of the
closed loop runs it (:func:`run_advisor`), with the settings a scenario's fabric file gives
the advisor's fabric policies (:func:`fabric_settings`).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from loop_options import LoopOptions

from toposcope.advisor.recommendations import HORIZON_S
from toposcope.sim.scenario_fabric import ScenarioFabric


def run_advisor(
    prom_url: str,
    sim_url: str,
    token_file: Path,
    audit_db: Path,
    window_s: int,
    options: LoopOptions,
    calibrate_from: Path | None = None,
) -> tuple[dict[str, Any], dict[str, str], float]:
    """One ``toposcope advise --apply`` run (its estimates calibrated from the outcome log
    ``calibrate_from`` when given): (JSON report, outcome by id, seconds).
    """
    argv = [
        sys.executable, "-m", "toposcope.cli", "advise",
        "--prometheus", prom_url, "--window", f"{window_s}s", "--format", "json",
        "--apply", "--resource-manager", "sim", "--rm-url", sim_url,
        "--rm-token-file", str(token_file), "--audit-db", str(audit_db),
        "--max-actions", str(options.max_actions),
        "--max-actions-per-node", str(options.max_actions_per_node),
    ]  # fmt: skip
    if calibrate_from is not None:
        argv += ["--calibrate-from", str(calibrate_from)]
    argv += fabric_settings(options.fabric)
    for node, path in sorted(options.p2p.items()):
        argv += ["--p2p-bandwidth", f"{node}={path}"]
    for node, path in sorted(options.memory.items()):
        argv += ["--memory-bandwidth", f"{node}={path}"]
    started = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)
    seconds = time.perf_counter() - started
    if done.returncode not in (0, 1):
        raise RuntimeError(f"toposcope advise exited {done.returncode}: {done.stderr[-2000:]}")
    outcomes = {}
    for line in done.stderr.splitlines():
        if line.startswith("apply "):
            rec_id, _, rest = line[len("apply ") :].partition(": ")
            outcomes[rec_id] = rest
    try:
        report: dict[str, Any] = json.loads(done.stdout)
    except json.JSONDecodeError:
        raise RuntimeError(
            f"toposcope advise printed no JSON report: {done.stderr[-2000:]}"
        ) from None
    return report, outcomes, seconds


def fabric_settings(fabric: ScenarioFabric | None) -> list[str]:
    """The advisor's fabric settings for a scenario with a fabric file: fabric-placement and
    nic-affinity read it (the documented ``fabric_file`` way), and a gang without a time
    limit is priced over the advisor's own horizon by both (the simulated jobs run until
    stopped).
    """
    if fabric is None or fabric.file is None:
        return []
    file = str(fabric.file)
    return [
        "--set", f"fabric-placement.fabric_file={file}",
        "--set", "fabric-placement.fabric_format=file",
        "--set", f"fabric-placement.unknown_time_left_s={HORIZON_S:g}",
        "--set", f"nic-affinity.fabric_file={file}",
        "--set", f"nic-affinity.unknown_time_left_s={HORIZON_S:g}",
    ]  # fmt: skip
