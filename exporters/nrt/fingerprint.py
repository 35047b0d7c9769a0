"""The pods fingerprint of a NodeResourceTopology, as k8stopologyawareschedwg/podfingerprint
computes it, so that scheduler-plugins' ``NodeResourceTopologyMatch`` can tell whether the
object describes the pods it sees on the node.

The procedure (format ``v001``, upstream ``podfingerprint.go``):

1. every pod contributes one 64-bit hash: XXH64 of its name, seeded with the XXH64 (seed 0)
   of its namespace;
2. those hashes are sorted in ascending order, so the pods' order does not matter;
3. the sorted hashes, each as 8 little-endian bytes, are hashed again with XXH64 (seed 0);
4. the signature is ``pfp0v001`` followed by that hash as 16 lower-case hexadecimal digits
   (the big-endian digest, as Go's ``hash.Hash64.Sum`` writes it).

``tests/fixtures/nrt/podfingerprint-vectors.json`` holds the upstream test data (259 pods and
the signature its ``TestCheck`` accepts), which the tests check this module against.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable

import xxhash

#: the prefix and the algorithm version of a signature
PREFIX = "pfp0"
VERSION = "v001"
#: the NodeResourceTopology attribute the signature is published in
ATTRIBUTE = "nodeTopologyPodsFingerprint"
#: the attribute that says which pods the signature covers, and its value for "every pod the
#: kubelet lists" (upstream's ``MethodAll``; the other method counts only pods holding
#: exclusive resources)
METHOD_ATTRIBUTE = "nodeTopologyPodsFingerprintMethod"
METHOD_ALL = "all"


def pod_hash(namespace: str, name: str) -> int:
    """One pod's contribution: XXH64 of ``name`` seeded with XXH64 of ``namespace``."""
    seed = xxhash.xxh64_intdigest(namespace.encode("utf-8"), seed=0)
    return xxhash.xxh64_intdigest(name.encode("utf-8"), seed=seed)


def pods_fingerprint(pods: Iterable[tuple[str, str]]) -> str:
    """The signature (``pfp0v001`` + 16 hex digits) of ``(namespace, name)`` pairs.

    A pod listed twice (one entry per container) counts once.
    """
    hashes = sorted(pod_hash(namespace, name) for namespace, name in set(pods))
    digest = xxhash.xxh64(seed=0)
    for value in hashes:
        digest.update(struct.pack("<Q", value))
    return f"{PREFIX}{VERSION}{digest.hexdigest()}"
