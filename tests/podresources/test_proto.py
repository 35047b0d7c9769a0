"""The repository's api.proto is wire-compatible with the kubelet's podresources v1 package.

Compatibility on the wire is the package, service and method names (they make the HTTP/2
path) and every field's number and type. These are compared with the kubelet's definition
(k8s.io/kubelet/pkg/apis/podresources/v1/api.proto), written out here, through the
descriptors of the modules generated at build time.
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
    },
    "ContainerResources": {
        "name": (1, _STRING, False),
        "devices": (2, _MESSAGE, True),
        "cpu_ids": (3, _INT64, True),
        "memory": (4, _MESSAGE, True),
    },
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
    }
    assert service.full_name == "v1.PodResourcesLister"


def test_every_field_has_the_kubelets_number_and_type() -> None:
    messages = api_pb2.DESCRIPTOR.message_types_by_name
    assert set(messages) == set(KUBELET_V1)
    for name, fields in KUBELET_V1.items():
        found = {f.name: (f.number, f.type, f.is_repeated) for f in messages[name].fields}
        assert found == fields, name


def test_an_answer_with_fields_newer_than_ours_still_decodes() -> None:
    """A 1.27+ kubelet adds dynamic_resources = 5 to ContainerResources: skipped, not an error."""
    known = api_pb2.ContainerResources(name="trainer", cpu_ids=[4, 5]).SerializeToString()
    # field 5, wire type 2 (length-delimited), 3 bytes of an embedded message
    newer = known + bytes([5 << 3 | 2, 3, 0x0A, 0x01, 0x78])
    decoded = api_pb2.ContainerResources.FromString(newer)
    assert decoded.name == "trainer"
    assert list(decoded.cpu_ids) == [4, 5]
