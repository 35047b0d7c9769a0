"""The local stack behind ``make up`` / ``make down`` / ``make status``.

Starts every part of toposcope on this machine as child processes that outlive this script,
with configuration, data and logs under the git-ignored ``.run/`` folder:

* the toposcope exporter for this host;
* a real Prometheus (Debian's ``prometheus`` package) scraping it.

Each part prefers a well-known port and takes a free one when that is busy; the chosen URLs
are printed and saved in ``.run/urls.json``. ``down`` stops what ``up`` started (SIGTERM,
then SIGKILL after a timeout) using the PID files. Later parts of the product (Alertmanager,
the simulated cluster, the advisor, the Dash app) add themselves to :data:`COMPONENTS`.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
RUN = REPO / ".run"
VENV_BIN = Path(sys.executable).parent


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    """True when nothing listens on ``host:port``."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def pick_port(preferred: int) -> int:
    """``preferred`` when free, else a free port chosen by the kernel."""
    if port_is_free(preferred):
        return preferred
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_http(url: str, deadline_s: float = 30.0) -> bool:
    """Poll ``url`` until it answers 200 or the deadline passes."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return True
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(0.2)
    return False


@dataclass
class Started:
    """A component that was started: its name, the URL to look at, its ready-check URL."""

    name: str
    url: str
    ready_url: str


def _spawn(name: str, argv: list[str]) -> int:
    logs = RUN / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    with open(logs / f"{name}.log", "ab") as log:
        process = subprocess.Popen(
            argv,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=REPO,
            start_new_session=True,
        )
    (RUN / "pids").mkdir(parents=True, exist_ok=True)
    (RUN / "pids" / f"{name}.pid").write_text(str(process.pid))
    return process.pid


def start_exporter(ports: dict[str, int]) -> Started:
    """The exporter on this host (all collectors; real NVML if present)."""
    port = pick_port(9847)
    ports["exporter"] = port
    _spawn(
        "exporter",
        [str(VENV_BIN / "toposcope"), "exporter", "--listen", f"127.0.0.1:{port}"],
    )
    url = f"http://127.0.0.1:{port}"
    return Started("exporter", f"{url}/metrics", f"{url}/-/healthy")


def prometheus_config(ports: dict[str, int]) -> str:
    """Prometheus configuration scraping every toposcope target of the stack."""
    config = {
        "global": {"scrape_interval": "5s", "evaluation_interval": "5s"},
        "scrape_configs": [
            {
                "job_name": "toposcope-host",
                "static_configs": [
                    {
                        "targets": [f"127.0.0.1:{ports['exporter']}"],
                        "labels": {"hostname": socket.gethostname()},
                    }
                ],
            }
        ],
    }
    return json.dumps(config, indent=2)


def start_prometheus(ports: dict[str, int]) -> Started:
    """A real Prometheus with its TSDB under ``.run/prometheus``."""
    binary = shutil.which("prometheus")
    if binary is None:
        raise SystemExit("prometheus is not installed: run `make up` (it installs it) or apt")
    port = pick_port(9090)
    ports["prometheus"] = port
    home = RUN / "prometheus"
    (home / "data").mkdir(parents=True, exist_ok=True)
    config_file = home / "prometheus.yml"
    config_file.write_text(prometheus_config(ports))
    _spawn(
        "prometheus",
        [
            binary,
            f"--config.file={config_file}",
            f"--storage.tsdb.path={home / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--web.enable-lifecycle",
        ],
    )
    url = f"http://127.0.0.1:{port}"
    return Started("prometheus", url, f"{url}/-/ready")


#: Start order matters: Prometheus' configuration names the exporter's port.
COMPONENTS: list[Callable[[dict[str, int]], Started]] = [start_exporter, start_prometheus]


def running() -> dict[str, int]:
    """Components with a PID file whose process is alive."""
    alive: dict[str, int] = {}
    for pid_file in sorted((RUN / "pids").glob("*.pid")):
        try:
            pid = int(pid_file.read_text().strip())
            os.kill(pid, 0)
        except (ValueError, ProcessLookupError, PermissionError):
            pid_file.unlink(missing_ok=True)
            continue
        alive[pid_file.stem] = pid
    return alive


def down() -> int:
    """Stop every component ``up`` started; exit 0 even when nothing ran."""
    alive = running()
    for name, pid in alive.items():
        try:
            os.killpg(pid, signal.SIGTERM)
        except ProcessLookupError:
            continue
        print(f"stopping {name} (pid {pid})")
    deadline = time.monotonic() + 10
    for name, pid in alive.items():
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.1)
        else:
            try:
                os.killpg(pid, signal.SIGKILL)
                print(f"killed {name} (pid {pid})")
            except ProcessLookupError:
                pass
        (RUN / "pids" / f"{name}.pid").unlink(missing_ok=True)
    if not alive:
        print("nothing running")
    return 0


def up() -> int:
    """Start the stack, wait until each part answers, print where to look."""
    if running():
        print("the stack is already running; `make down` first. Current state:")
        return status()
    RUN.mkdir(exist_ok=True)
    ports: dict[str, int] = {}
    started: list[Started] = []
    for component in COMPONENTS:
        started.append(component(ports))
    failed = [s.name for s in started if not wait_http(s.ready_url)]
    urls = {s.name: s.url for s in started}
    (RUN / "urls.json").write_text(json.dumps(urls, indent=2))
    if failed:
        print(f"not ready: {', '.join(failed)}; see .run/logs/", file=sys.stderr)
        down()
        return 1
    print("toposcope is running:")
    for s in started:
        print(f"  {s.name:<12} {s.url}")
    prom = urls.get("prometheus")
    if prom:
        print(f"  try: {prom}/graph?g0.expr=toposcope_numa_node_info")
    print("logs: .run/logs/   stop: make down")
    return 0


def status() -> int:
    """Print which components run and their URLs; exit 1 when none runs."""
    alive = running()
    urls: dict[str, str] = {}
    if (RUN / "urls.json").exists():
        urls = json.loads((RUN / "urls.json").read_text())
    for name, pid in alive.items():
        print(f"  {name:<12} pid {pid:<8} {urls.get(name, '')}")
    if not alive:
        print("nothing running")
        return 1
    return 0


def main() -> int:
    """Dispatch ``up`` / ``down`` / ``status``."""
    parser = argparse.ArgumentParser(description="toposcope local stack")
    parser.add_argument("action", choices=["up", "down", "status"])
    args = parser.parse_args()
    return {"up": up, "down": down, "status": status}[args.action]()


if __name__ == "__main__":
    sys.exit(main())
