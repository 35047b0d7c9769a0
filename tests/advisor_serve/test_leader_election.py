"""Two or three ``toposcope advisor serve`` processes sharing one audit log: one acts.

The leader is killed (SIGKILL) while the resource manager holds one of its actions, twice:
once the resource manager finishes the action after the leader died, once it loses it. Each
time a standby takes over, settles the intent the dead leader left (recorded as done, or as
not applied and sent again on the next apply), and no action reaches the resource manager
twice. Run with the file lock beside the audit log and with a Lease on the fake API server.
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.advisor.fakes import FakeResourceManager, FakeServer
from tests.advisor_serve.conftest import (
    API_TOKEN,
    RM_TOKEN,
    SPREAD,
    Placement,
    PromQL,
    call,
    host_text,
)
from tests.advisor_serve.test_cli import MAIN
from tests.kube.fake_apiserver import kubeconfig, serve
from tests.kube.fake_leases import LeaseApiServer
from tests.procs import free_port, poll
from toposcope.advisor.leader_election import ElectionSettings
from toposcope.advisor.leader_locks import LeaseLock
from toposcope.kubeapi.client import KubeApi
from toposcope.rm import Allocation

NAMESPACE = "toposcope"
#: short periods, so that a standby takes over within a few seconds, yet long enough that a
#: leader on a machine busy with the rest of the suite does not miss its renewal deadline and
#: step down between two steps of a test (a 600 ms deadline did, twice, in full runs)
PERIODS = ["--leader-elect-lease-duration", "4s", "--leader-elect-renew-deadline", "3s"]
PERIODS += ["--leader-elect-retry-period", "200ms"]
#: "eval" runs like "train": two pin recommendations
EVAL = Placement(SPREAD.cores, SPREAD.memory_gib, pid=4343)
ALLOCATION = Allocation("n1", list(range(16)), [0, 1], [])


@dataclass
class Replica:
    """One ``toposcope advisor serve`` process and its base URL."""

    name: str
    process: subprocess.Popen[bytes]
    url: str

    def leader(self) -> float | None:
        """Its ``toposcope_advisor_leader`` gauge (``None`` while it does not answer)."""
        _, _, text = call(f"{self.url}/metrics")
        for line in str(text).splitlines():
            if line.startswith("toposcope_advisor_leader "):
                return float(line.split()[1])
        return None

    def ready(self) -> bool:
        """Whether it answers and has analysed once."""
        return call(f"{self.url}/-/ready")[0] == 200

    def kill(self) -> None:
        """SIGKILL: no clean-up, no release of its lock."""
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=10)


@dataclass
class Cluster:
    """The fakes (PromQL, resource manager, maybe an API server) and the replicas."""

    tmp: Path
    rm: FakeResourceManager
    prometheus_url: str
    rm_url: str
    lock_args: list[str]
    replicas: list[Replica] = field(default_factory=list)

    def start(self, name: str) -> Replica:
        token = self.tmp / "token"
        rm_token = self.tmp / "rm-token"
        for path, text in ((token, API_TOKEN), (rm_token, RM_TOKEN)):
            path.write_text(text)
            path.chmod(0o600)
        port = free_port()
        argv = [
            sys.executable, "-c", MAIN, "serve",
            "--prometheus", self.prometheus_url, "--window", "10m", "--interval", "60s",
            "--listen", f"127.0.0.1:{port}", "--api-token-file", str(token),
            "--resource-manager", "sim", "--rm-url", self.rm_url, "--rm-token-file", str(rm_token),
            "--audit-db", str(self.tmp / "audit.sqlite"),
            "--leader-elect", *PERIODS, *self.lock_args,
        ]  # fmt: skip
        with open(self.tmp / f"{name}.log", "wb") as log:
            process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        replica = Replica(name, process, f"http://127.0.0.1:{port}")
        self.replicas.append(replica)
        poll(replica.ready, what=f"{name} ready")
        return replica

    def log(self) -> str:
        return "\n".join(
            f"--- {r.name}\n{(self.tmp / f'{r.name}.log').read_text()}" for r in self.replicas
        )


@pytest.fixture(params=["file", "leases"])
def cluster(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Cluster]:
    promql = PromQL(host_text({"train": SPREAD, "eval": EVAL}))
    rm = FakeResourceManager(RM_TOKEN, {"train": ALLOCATION, "eval": ALLOCATION})
    lock_args = ["--leader-elect-resource-lock", "file"]
    api = None
    if request.param == "leases":
        api = serve(LeaseApiServer())
        config = tmp_path / "kubeconfig"
        config.write_text(kubeconfig(api.url))
        lock_args = ["--leader-elect-resource-lock", "leases"]
        lock_args += ["--leader-elect-kubeconfig", str(config)]
        lock_args += ["--leader-elect-resource-namespace", NAMESPACE]
    with FakeServer(promql).run() as prometheus, FakeServer(rm).run() as rm_server:
        found = Cluster(tmp_path, rm, prometheus.url, f"{rm_server.url}/api/v1", lock_args)
        try:
            yield found
        finally:
            for replica in found.replicas:
                if replica.process.poll() is None:
                    replica.process.kill()
                    replica.process.wait(timeout=10)
            if found.rm.gate is not None:
                found.rm.gate.open()
            if api is not None:
                api.stop()


def post(replica: Replica, rec_id: str, action: str = "apply") -> tuple[int, dict[str, str], Any]:
    return call(f"{replica.url}/api/v1/recommendations/{rec_id}/{action}", "POST", API_TOKEN)


def pins(replica: Replica) -> dict[str, dict[str, Any]]:
    """The pin recommendations of its report, by workload name."""
    status, _, body = call(f"{replica.url}/api/v1/recommendations")
    assert status == 200, body
    found = {r["target"]["workload"]: r for r in body["recommendations"] if r["kind"] == "pin"}
    assert set(found) == {"train", "eval"}, body
    return found


def rows(replica: Replica, rec_id: str) -> dict[str, str]:
    """Request id -> state of a recommendation's audit rows, as the replica answers them."""
    status, _, body = call(f"{replica.url}/api/v1/audit?recommendation={rec_id}")
    assert status == 200, body
    return {row["request_id"]: row["state"] for row in body["actions"]}


def kill_mid_apply(cluster: Cluster, leader: Replica, rec_id: str, *, drop: bool) -> None:
    """Apply ``rec_id`` on ``leader``, kill it while the resource manager holds the first
    action, then let the resource manager finish (or, ``drop``, lose) that action.
    """
    gate = cluster.rm.hold(drop=drop)

    def doomed() -> None:
        with contextlib.suppress(OSError):  # its server dies under it
            post(leader, rec_id)

    caller = threading.Thread(target=doomed, daemon=True)
    caller.start()
    poll(gate.reached.is_set, what="the resource manager holding the action")
    leader.kill()
    gate.open()
    caller.join(timeout=30)
    cluster.rm.gate = None


def test_killing_the_leader_mid_apply_loses_and_duplicates_nothing(cluster: Cluster) -> None:
    a = cluster.start("a")
    poll(lambda: a.leader() == 1, what="a leading")
    b = cluster.start("b")
    assert b.leader() == 0
    recs = pins(b)
    train, evaluate = recs["train"], recs["eval"]
    train_actions = [x["request_id"] for x in train["actions"]]
    eval_actions = [x["request_id"] for x in evaluate["actions"]]

    status, headers, body = post(b, train["id"])
    assert status == 503, body
    assert body["leader"] and body["leader"] in body["error"]
    assert int(headers["Retry-After"]) >= 1
    assert cluster.rm.posts == 0
    assert call(f"{b.url}/api/v1/recommendations/{train['id']}")[0] == 200  # reads work

    # 1: the resource manager finishes the pin after the leader died
    kill_mid_apply(cluster, a, train["id"], drop=False)
    poll(lambda: b.leader() == 1, what="b taking over", deadline_s=20)
    assert rows(b, train["id"]) == {train_actions[0]: "succeeded"}, cluster.log()
    status, _, body = post(b, train["id"])  # the caller whose call died tries again
    assert (status, body["result"]) == (200, "applied"), body
    assert rows(b, train["id"]) == dict.fromkeys(train_actions, "succeeded")

    # 2: a third replica stands by; the resource manager loses the pin of the leader it holds
    c = cluster.start("c")
    assert c.leader() == 0
    kill_mid_apply(cluster, b, evaluate["id"], drop=True)
    poll(lambda: c.leader() == 1, what="c taking over", deadline_s=20)
    assert rows(c, evaluate["id"]) == {eval_actions[0]: "not-applied"}, cluster.log()
    status, _, body = post(c, evaluate["id"])
    assert (status, body["result"]) == (200, "applied"), body
    assert rows(c, evaluate["id"]) == dict.fromkeys(eval_actions, "succeeded")

    assert cluster.rm.carried == dict.fromkeys(train_actions + eval_actions, 1)
    status, _, body = post(c, train["id"])
    assert (status, body["result"], body["detail"]) == (200, "skipped", "already applied")


def test_a_lease_is_taken_by_one_candidate_and_over_only_once_it_expired() -> None:
    fake = LeaseApiServer()
    running = serve(fake)
    try:
        api = KubeApi(running.url, "t0ken", timeout=5)
        settings = ElectionSettings(lease_duration=1.0, renew_deadline=0.6, retry_period=0.1)
        first = LeaseLock(api, NAMESPACE, "advisor", "first", settings.lease_duration)
        second = LeaseLock(api, NAMESPACE, "advisor", "second", settings.lease_duration)
        assert first.acquire_or_renew()
        assert not second.acquire_or_renew()
        assert second.holder() == "first"
        assert first.acquire_or_renew()  # a renewal
        lease = fake.lease(NAMESPACE, "advisor")
        assert lease is not None and lease["spec"]["leaseTransitions"] == 0
        # a write on a stale resourceVersion loses: 409, not a second holder
        stale = LeaseLock(api, NAMESPACE, "advisor", "stale", settings.lease_duration)
        stale._version = "1"
        assert not stale._write(lease, stale._spec("2024-01-01T00:00:00.000000Z", 1))
        deadline = time.monotonic() + 5
        while not second.acquire_or_renew():  # first stopped renewing
            assert time.monotonic() < deadline
            time.sleep(settings.retry_period)
        taken = fake.lease(NAMESPACE, "advisor")
        assert taken is not None
        assert taken["spec"]["holderIdentity"] == "second"
        assert taken["spec"]["leaseTransitions"] == 1
        assert not first.acquire_or_renew()
        second.release()
        assert first.acquire_or_renew()  # released: taken at once, no lease to wait out
    finally:
        running.stop()
