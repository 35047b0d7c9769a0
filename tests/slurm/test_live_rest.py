"""slurmrestd's failures as the real daemon gives them: errors under HTTP 200, refused JWTs."""

from __future__ import annotations

import time

import pytest

from tests.slurm.conftest import wait_running
from tests.slurm.test_rest_client import make_jwt
from toposcope.slurm.daemons import wait_for
from toposcope.slurm.errors import SlurmAnswerError, SlurmAuthError, SlurmError
from toposcope.slurm.jwt import parse_jwt
from toposcope.slurm.localcluster import LocalCluster
from toposcope.slurm.reader import RestReader
from toposcope.slurm.rest import SlurmRestClient


def test_an_error_answered_with_http_200(slurm: LocalCluster) -> None:
    job = slurm.sbatch("--gres=gpu:1", "--wrap", "sleep 600")
    wait_running(slurm, job)
    client = SlurmRestClient(slurm.rest_url, parse_jwt(slurm.token(), "scontrol token"))
    with pytest.raises(SlurmAnswerError, match='Unknown key "job"') as caught:
        client.request("POST", f"job/{job}", {"job": {"nodelist": slurm.node_names[0]}})
    assert caught.value.status == 200


def test_an_unknown_job_is_an_error_not_an_empty_list(slurm: LocalCluster) -> None:
    client = SlurmRestClient(slurm.rest_url, parse_jwt(slurm.token(), "scontrol token"))
    with pytest.raises(SlurmAnswerError, match="Unable to find JobId=999999"):
        client.get("job/999999")


def test_an_expired_token_is_refused(slurm: LocalCluster) -> None:
    jwt = parse_jwt(slurm.token(lifespan_s=1), "a one-second token")
    reader = RestReader(SlurmRestClient(slurm.rest_url, jwt))

    def refused() -> SlurmError | None:
        try:
            reader.read()
        except SlurmAuthError as exc:
            return exc
        return None

    error = wait_for(refused, "the one-second token refused", 15)
    assert "expired at" in str(error) and "scontrol token username=root" in str(error)


#: requests with the expired token before the test gives up on Slurm refusing it
EXPIRED_TOKEN_TRIES = 5


def test_slurmctld_refuses_an_expired_token_that_the_client_sent(slurm: LocalCluster) -> None:
    """With its clock set back, the client sends the expired token: Slurm's own refusal.

    slurmrestd 22.05 now and then (about one run of this file in ten, after requests with
    valid tokens on the same daemon) answers one request that carries an expired token, so
    the token is sent a few times; the refusal must come and be explained.
    """
    jwt = parse_jwt(slurm.token(lifespan_s=1), "a one-second token")
    wait_for(lambda: time.time() > (jwt.expires_at or 0) + 1, "the token's expiry", 15)
    client = SlurmRestClient(slurm.rest_url, jwt, clock=lambda: 0.0)
    refusals: list[SlurmAnswerError] = []
    for _ in range(EXPIRED_TOKEN_TRIES):
        try:
            client.get("jobs")
        except SlurmAnswerError as exc:
            refusals.append(exc)
            break
    assert refusals, f"slurmrestd answered the expired token {EXPIRED_TOKEN_TRIES} times"
    assert "refuses the JWT from a one-second token" in str(refusals[0])


def test_a_token_signed_with_another_key_is_refused(slurm: LocalCluster) -> None:
    forged = make_jwt({"sun": "root", "exp": int(time.time()) + 3600, "iat": int(time.time())})
    client = SlurmRestClient(slurm.rest_url, parse_jwt(forged, "a forged token"))
    with pytest.raises(SlurmAnswerError, match="refuses the JWT from a forged token"):
        client.get("jobs")


def test_nodes_name_the_refusal_differently_and_are_explained_too(slurm: LocalCluster) -> None:
    """``/nodes`` spells Slurm's error number ``errno``; the explanation still comes."""
    forged = make_jwt({"sun": "root"})
    client = SlurmRestClient(slurm.rest_url, parse_jwt(forged, "a token without expiry"))
    with pytest.raises(SlurmAnswerError, match=r"Unspecified error .* refuses the JWT"):
        client.get("nodes")
