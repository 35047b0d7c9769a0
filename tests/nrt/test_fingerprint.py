"""The pods fingerprint: podfingerprint's ``pfp0v001`` signature of a node's pods."""

from __future__ import annotations

import json
import re

import xxhash

from tests.helpers import FIXTURES
from toposcope.exporters.nrt.fingerprint import pod_hash, pods_fingerprint

VECTORS = FIXTURES / "nrt" / "podfingerprint-vectors.json"
PODS = [("research", "llm-train-0"), ("default", "nginx-debug"), ("kube-system", "coredns-1")]


def test_the_signature_is_the_prefix_and_sixteen_hex_digits() -> None:
    assert re.fullmatch(r"pfp0v001[0-9a-f]{16}", pods_fingerprint(PODS))


def test_the_order_of_the_pods_does_not_matter_and_each_counts_once() -> None:
    signature = pods_fingerprint(PODS)
    assert pods_fingerprint(reversed(PODS)) == signature
    assert pods_fingerprint([*PODS, PODS[0]]) == signature


def test_any_pod_more_less_or_renamed_changes_it() -> None:
    signature = pods_fingerprint(PODS)
    others = {
        pods_fingerprint(PODS[:2]),
        pods_fingerprint([*PODS, ("default", "nginx-2")]),
        pods_fingerprint([("research", "llm-train-1"), *PODS[1:]]),
        pods_fingerprint([]),
    }
    assert signature not in others
    assert len(others) == 4


def test_it_hashes_the_sorted_pod_hashes_with_xxh64() -> None:
    """The procedure of the module docstring, spelled out with the xxhash library."""
    seed = xxhash.xxh64_intdigest(b"default")
    assert pod_hash("default", "nginx") == xxhash.xxh64_intdigest(b"nginx", seed=seed)
    assert pod_hash("default", "nginx") != pod_hash("defaultn", "ginx")
    hashes = sorted(pod_hash(ns, name) for ns, name in PODS)
    stream = b"".join(h.to_bytes(8, "little") for h in hashes)
    assert pods_fingerprint(PODS) == "pfp0v001" + xxhash.xxh64(stream).hexdigest()
    assert pods_fingerprint([]) == "pfp0v001" + xxhash.xxh64(b"").hexdigest()


def test_the_published_vectors_of_podfingerprint() -> None:
    for case in json.loads(VECTORS.read_text(encoding="utf-8")):
        pods = [(namespace, name) for namespace, name in case["pods"]]
        assert pods_fingerprint(pods) == case["fingerprint"], case
