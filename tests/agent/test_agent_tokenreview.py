"""The agent in Kubernetes: each caller's own ServiceAccount token, checked by TokenReview.

The API server is :mod:`tests.kube.fake_tokenreview` on loopback; the agent is the real app
(in this process, and once as a real ``toposcope agent`` process), pinning a real child.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.agent.conftest import Child, cpus_allowed
from tests.agent.test_agent_http import post, serve
from tests.kube.fake_tokenreview import API_AUDIENCE, FakeTokenReview, serving
from tests.procs import free_port, poll, running
from toposcope.agent import cli as agent_cli
from toposcope.errors import ConfigError
from toposcope.kubeapi.client import KubeApi
from toposcope.kubeapi.tokenreview import TokenReviewVerifier

REVIEWER = "agent-own-api-token"
ADVISOR = "advisor-projected-token-for-the-agent"
OTHER = "some-other-pods-projected-token"
FOR_API = "advisor-default-token-for-the-api-server"
AUDIENCE = "toposcope-agent"
ALLOWED = "toposcope:toposcope-advisor"


@pytest.fixture
def fake() -> FakeTokenReview:
    reviews = FakeTokenReview(REVIEWER)
    reviews.issue(ADVISOR, "toposcope", "toposcope-advisor", AUDIENCE)
    reviews.issue(OTHER, "ml", "trainer", AUDIENCE)
    reviews.issue(FOR_API, "toposcope", "toposcope-advisor", API_AUDIENCE)
    return reviews


@pytest.fixture
def apiserver(fake: FakeTokenReview) -> Iterator[str]:
    with serving(fake) as url:
        yield url


def tokenreview_args(*extra: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="toposcope agent")
    agent_cli.add_arguments(parser)
    return parser.parse_args(
        [
            "--listen", "127.0.0.1:0", "--hostname", "n1",
            "--auth.kubernetes-tokenreview", "--auth.allowed-service-account", ALLOWED,
            *extra,
        ]
    )  # fmt: skip


def serve_with(api: KubeApi) -> Iterator[str]:
    server, _ = agent_cli.build_server(tokenreview_args(), api=api)
    server.start()
    try:
        yield f"http://127.0.0.1:{server.port}/api/v1"
    finally:
        server.shutdown()


@pytest.fixture
def agent(apiserver: str) -> Iterator[str]:
    yield from serve_with(KubeApi(apiserver, REVIEWER, timeout=5))


def pin(child: Child, request_id: str) -> dict[str, object]:
    return {"request_id": request_id, "kind": "pin", "workload": child.workload, "cpus": [0]}


def test_the_allowed_service_accounts_token_changes_state(
    agent: str, child: Child, fake: FakeTokenReview, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.DEBUG):
        code, answer = post(f"{agent}/actions", pin(child, "k1"), ADVISOR)
    assert code == 202, answer
    assert set(cpus_allowed(child.pid).values()) == {"0"}
    (review,) = fake.reviews
    assert review["spec"] == {"token": ADVISOR, "audiences": [AUDIENCE]}
    assert not fake.invalid
    assert ADVISOR not in caplog.text


@pytest.mark.parametrize(
    ("token", "status", "message"),
    [
        (None, 401, "missing Authorization"),
        ("never-issued", 401, "did not authenticate"),
        (OTHER, 403, "system:serviceaccount:ml:trainer may not change"),
        # the advisor's own account, but a token minted for the API server, not for us
        (FOR_API, 401, "did not authenticate"),
    ],
    ids=["unauthenticated", "unknown-token", "other-account", "wrong-audience"],
)
def test_other_tokens_change_nothing(
    agent: str,
    child: Child,
    token: str | None,
    status: int,
    message: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    before = cpus_allowed(child.pid)
    with caplog.at_level(logging.DEBUG):
        code, answer = post(f"{agent}/actions", pin(child, "k2"), token)
    assert code == status
    assert message in str(answer["error"])
    assert cpus_allowed(child.pid) == before
    if token is not None:
        assert token not in caplog.text


def test_a_review_without_our_audience_is_refused(child: Child, fake: FakeTokenReview) -> None:
    """An authenticator that is not audience-aware answers no audiences: not ours, 403."""

    class NotAudienceAware:
        def request(self, method: str, path: str, body: object = None) -> object:
            answer = KubeApi(url, REVIEWER).request(method, path, body)
            answer["status"]["audiences"] = []
            return answer

    with serving(fake) as url:
        verifier = TokenReviewVerifier(NotAudienceAware(), [ALLOWED], audience=AUDIENCE)
        refusal = verifier.verify(ADVISOR)
    assert refusal is not None and refusal.status == 403
    assert AUDIENCE in refusal.message


def test_without_the_api_server_it_answers_503_and_changes_nothing(
    child: Child, caplog: pytest.LogCaptureFixture
) -> None:
    closed = f"http://127.0.0.1:{free_port()}"
    before = cpus_allowed(child.pid)
    with caplog.at_level(logging.DEBUG):
        for url in serve_with(KubeApi(closed, REVIEWER, timeout=2)):
            code, answer = post(f"{url}/actions", pin(child, "k3"), ADVISOR)
            with urllib.request.urlopen(f"{url}/nodes", timeout=10) as response:
                assert response.status == 200  # reads do not need the API server
    assert code == 503
    assert "TokenReview" in str(answer["error"]) and "nothing was done" in str(answer["error"])
    assert cpus_allowed(child.pid) == before
    assert ADVISOR not in caplog.text


def test_an_agent_not_allowed_to_review_fails_closed(
    fake: FakeTokenReview, apiserver: str, child: Child
) -> None:
    fake.may_review = False
    before = cpus_allowed(child.pid)
    for url in serve_with(KubeApi(apiserver, REVIEWER, timeout=5)):
        code, _ = post(f"{url}/actions", pin(child, "k4"), ADVISOR)
    assert code == 503
    assert cpus_allowed(child.pid) == before


def test_accepted_tokens_are_remembered_for_the_ttl_only(
    fake: FakeTokenReview, apiserver: str
) -> None:
    now = [1000.0]
    verifier = TokenReviewVerifier(
        KubeApi(apiserver, REVIEWER), [ALLOWED], ttl=30, clock=lambda: now[0]
    )
    assert verifier.verify(ADVISOR) is None
    now[0] += 29.9
    assert verifier.verify(ADVISOR) is None
    assert len(fake.reviews) == 1  # answered from the cache
    now[0] += 0.1
    fake.tokens.pop(ADVISOR)  # revoked: the next review says so
    refusal = verifier.verify(ADVISOR)
    assert refusal is not None and refusal.status == 401
    assert len(fake.reviews) == 2
    assert verifier.verify(OTHER) is not None and len(fake.reviews) == 3  # refusals not cached
    assert verifier.verify(OTHER) is not None and len(fake.reviews) == 4


def test_the_cache_is_bounded_and_keyed_by_hash(fake: FakeTokenReview, apiserver: str) -> None:
    for number in range(5):
        fake.issue(f"t{number}", "toposcope", "toposcope-advisor", AUDIENCE)
    verifier = TokenReviewVerifier(KubeApi(apiserver, REVIEWER), [ALLOWED], max_cached=3)
    for number in range(5):
        assert verifier.verify(f"t{number}") is None
    assert verifier.cached() == 3
    assert not any(f"t{n}" in key for key in verifier._accepted for n in range(5))


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--auth.kubernetes-tokenreview"], "needs --auth.allowed-service-account"),
        (["--auth.allowed-service-account", ALLOWED], "needs --auth.kubernetes-tokenreview"),
        (
            ["--auth.kubernetes-tokenreview", "--auth.allowed-service-account", "advisor"],
            "is not NAMESPACE:NAME",
        ),
        (
            [
                "--auth.kubernetes-tokenreview",
                "--auth.allowed-service-account",
                ALLOWED,
                "--auth.cache-ttl",
                "9999",
            ],
            "0 to 600",
        ),
    ],
)
def test_bad_auth_options_are_config_errors(argv: list[str], message: str) -> None:
    parser = argparse.ArgumentParser()
    agent_cli.add_arguments(parser)
    args = parser.parse_args(argv)
    with pytest.raises(ConfigError, match=message):
        agent_cli.tokenreview_verifier(args, api=KubeApi("http://127.0.0.1:1"))


def test_a_token_file_and_tokenreview_are_exclusive(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("x\n")
    token.chmod(0o600)
    args = tokenreview_args("--token-file", str(token))
    with pytest.raises(ConfigError, match="not both"):
        agent_cli.tokenreview_verifier(args, api=KubeApi("http://127.0.0.1:1"))


def test_static_token_mode_is_unchanged(tmp_path: Path, child: Child) -> None:
    token = tmp_path / "token"
    token.write_text("static\n")
    token.chmod(0o600)
    parser = argparse.ArgumentParser()
    agent_cli.add_arguments(parser)
    args = parser.parse_args(["--listen", "127.0.0.1:0", "--token-file", str(token)])
    for url in serve(args):
        assert post(f"{url}/actions", pin(child, "s1"), ADVISOR)[0] == 403
        assert post(f"{url}/actions", pin(child, "s2"), "static")[0] == 202


def test_a_real_agent_process_never_logs_the_token(
    fake: FakeTokenReview, apiserver: str, child: Child, tmp_path: Path
) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "current-context": "c",
                "contexts": [{"name": "c", "context": {"cluster": "k", "user": "agent"}}],
                "clusters": [{"name": "k", "cluster": {"server": apiserver}}],
                "users": [{"name": "agent", "user": {"token": REVIEWER}}],
            }
        )
    )
    port = free_port()
    toposcope = str(Path(sys.executable).with_name("toposcope"))
    argv = [
        toposcope, "agent", "--listen", f"127.0.0.1:{port}", "--hostname", "n1",
        "--log.level", "debug", "--auth.kubernetes-tokenreview",
        "--auth.allowed-service-account", ALLOWED, "--auth.kubeconfig", str(kubeconfig),
    ]  # fmt: skip
    url = f"http://127.0.0.1:{port}/api/v1"
    log = tmp_path / "agent.log"
    with running(argv, log) as process:
        poll(lambda: urllib.request.urlopen(f"{url}/healthz", timeout=2).status == 200)
        assert post(f"{url}/actions", pin(child, "r1"), OTHER)[0] == 403
        assert post(f"{url}/actions", pin(child, "r2"), ADVISOR)[0] == 202
        assert post(f"{url}/actions", pin(child, "r2"), ADVISOR)[0] == 200  # cached: no review
        assert process.poll() is None
    assert len(fake.reviews) == 2
    text = log.read_text(encoding="utf-8", errors="replace")
    assert "not an allowed service account" in text  # the refusal is logged...
    for secret in (ADVISOR, OTHER, REVIEWER):
        assert secret not in text  # ...without any token
    assert json.dumps(ADVISOR) not in text
