"""The repository's api.proto is wire-compatible with the kubelet's podresources v1 package.

Compatibility on the wire is the package, service and method names (they make the HTTP/2
path) and every field's number and type. These are compared with the kubelet's definition
(k8s.io/kubelet/pkg/apis/podresources/v1/api.proto, read at kubernetes/kubelet commit
63b3249724f7d89a8aa48f9acb3811f193c9aa68, July 2026; Apache-2.0), written out here, through
the descriptors of the modules generated at build time.
"""

from __future__ import annotations

from google.protobuf.descriptor import FieldDescriptor

from toposcope.host.podresources import api_pb2

_MESSAGE = FieldDescriptor.TYPE_MESSAGE
_STRING = FieldDescriptor.TYPE_STRING
_INT64 = FieldDescriptor.TYPE_INT64
_UINT64 = FieldDescriptor.TYPE_UINT64

#: message -> field -> (number, type, repeated), as the kubelet's v1 api.proto declares them
KUBELET_V1 = {
    "ListPodResourcesRequest": {},
    "ListPodResourcesResponse": {"pod_resources": (1, _MESSAGE, True)},
    "PodResources": {
        "name": (1, _STRING, False),
        "namespace": (2, _STRING, False),
        "containers": (3, _MESSAGE, True),
        "cpu_ids": (4, _INT64, True),
        "memory": (5, _MESSAGE, True),
    },
    "ContainerResources": {
        "name": (1, _STRING, False),
        "devices": (2, _MESSAGE, True),
        "cpu_ids": (3, _INT64, True),
        "memory": (4, _MESSAGE, True),
        "dynamic_resources": (5, _MESSAGE, True),
    },
    # class_name = 1 is a tombstone upstream (removed in 1.31): reserved here
    "DynamicResource": {
        "claim_name": (2, _STRING, False),
        "claim_namespace": (3, _STRING, False),
        "claim_resources": (4, _MESSAGE, True),
    },
    "ClaimResource": {
        "cdi_devices": (1, _MESSAGE, True),
        "driver_name": (2, _STRING, False),
        "pool_name": (3, _STRING, False),
        "device_name": (4, _STRING, False),
        "share_id": (5, _STRING, False),
    },
    "CDIDevice": {"name": (1, _STRING, False)},
    "GetPodResourcesRequest": {
        "pod_name": (1, _STRING, False),
        "pod_namespace": (2, _STRING, False),
    },
    "GetPodResourcesResponse": {"pod_resources": (1, _MESSAGE, False)},
    "ContainerDevices": {
        "resource_name": (1, _STRING, False),
        "device_ids": (2, _STRING, True),
        "topology": (3, _MESSAGE, False),
    },
    "TopologyInfo": {"nodes": (1, _MESSAGE, True)},
    "NUMANode": {"ID": (1, _INT64, False)},
    "ContainerMemory": {
        "memory_type": (1, _STRING, False),
        "size": (2, _UINT64, False),
        "topology": (3, _MESSAGE, False),
    },
    "AllocatableResourcesRequest": {},
    "AllocatableResourcesResponse": {
        "devices": (1, _MESSAGE, True),
        "cpu_ids": (2, _INT64, True),
        "memory": (3, _MESSAGE, True),
    },
}


def test_package_service_and_method_paths_are_the_kubelets() -> None:
    assert api_pb2.DESCRIPTOR.package == "v1"
    service = api_pb2.DESCRIPTOR.services_by_name["PodResourcesLister"]
    methods = {m.name: (m.input_type.name, m.output_type.name) for m in service.methods}
    assert methods == {
        "List": ("ListPodResourcesRequest", "ListPodResourcesResponse"),
        "GetAllocatableResources": ("AllocatableResourcesRequest", "AllocatableResourcesResponse"),
        "Get": ("GetPodResourcesRequest", "GetPodResourcesResponse"),
    }
    assert service.full_name == "v1.PodResourcesLister"


def test_every_field_has_the_kubelets_number_and_type() -> None:
    messages = api_pb2.DESCRIPTOR.message_types_by_name
    assert set(messages) == set(KUBELET_V1)
    for name, fields in KUBELET_V1.items():
        found = {f.name: (f.number, f.type, f.is_repeated) for f in messages[name].fields}
        assert found == fields, name


def test_share_id_has_presence_and_class_name_stays_reserved() -> None:
    """``optional string share_id = 5`` as upstream (presence kept); field 1 of DynamicResource
    (the removed class_name) is reserved, so no later edit can reuse its number.
    """
    messages = api_pb2.DESCRIPTOR.message_types_by_name
    share = messages["ClaimResource"].fields_by_name["share_id"]
    assert share.has_presence
    claim = messages["DynamicResource"]
    assert 1 not in claim.fields_by_number
    assert api_pb2.DynamicResource.FromString(bytes([1 << 3 | 2, 1, 0x78])).claim_name == ""


def test_the_kubelets_bytes_of_a_dra_container_decode() -> None:
    """Bytes laid out as the kubelet's Go code writes them, field by field."""

    def text(number: int, value: bytes) -> bytes:
        return bytes([number << 3 | 2, len(value)]) + value

    resource = (
        text(1, text(1, b"k8s.gpu.nvidia.com/claim=abc-gpu-0"))
        + text(2, b"gpu.nvidia.com")
        + text(3, b"node-a")
        + text(4, b"gpu-0")
    )
    claim = text(2, b"single-gpu") + text(3, b"gpu-test") + text(4, resource)
    container = text(1, b"ctr") + text(5, claim)
    decoded = api_pb2.ContainerResources.FromString(container)
    (dynamic,) = decoded.dynamic_resources
    assert (dynamic.claim_name, dynamic.claim_namespace) == ("single-gpu", "gpu-test")
    (found,) = dynamic.claim_resources
    assert (found.driver_name, found.pool_name, found.device_name) == (
        "gpu.nvidia.com",
        "node-a",
        "gpu-0",
    )
    assert [c.name for c in found.cdi_devices] == ["k8s.gpu.nvidia.com/claim=abc-gpu-0"]
    assert not found.HasField("share_id")


def test_an_answer_with_fields_newer_than_ours_still_decodes() -> None:
    """A field a later kubelet adds to ContainerResources (here 6) is skipped, not an error."""
    known = api_pb2.ContainerResources(name="trainer", cpu_ids=[4, 5]).SerializeToString()
    # field 6, wire type 2 (length-delimited), 3 bytes of an embedded message
    newer = known + bytes([6 << 3 | 2, 3, 0x0A, 0x01, 0x78])
    decoded = api_pb2.ContainerResources.FromString(newer)
    assert decoded.name == "trainer"
    assert list(decoded.cpu_ids) == [4, 5]
