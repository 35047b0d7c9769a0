"""A client of the kubelet's pod-resources gRPC API (``v1.PodResourcesLister``).

It talks over the kubelet's unix socket with the stubs generated from ``api.proto`` at
build time, and returns :mod:`~toposcope.host.podresources.records`. Importing
this module needs the ``kubernetes`` extra (grpcio, protobuf); nothing else in the exporter
imports it until a kubelet socket is configured or found.

Failure handling, each on the call it happens to:

* no socket file (kubelet down, not a Kubernetes node, directory not mounted), a refused
  connection, a deadline passed: :class:`KubeletUnavailable`; the channel is dropped, so the
  next call (the next scrape) connects afresh, without gRPC's reconnect back-off. A kubelet
  restart makes a new socket file; because the directory, not the file, is mounted, the new
  one is seen.
* a new socket file (the kubelet restarted, perhaps upgraded): a new channel, and every
  call is tried again.
* ``GetAllocatableResources`` answered ``UNIMPLEMENTED`` (kubelet < 1.21, or the
  ``KubeletPodResourcesGetAllocatable`` gate off): ``None``, and not asked again of that
  kubelet.
* no ``memory`` in the answer (kubelet < 1.22): empty memory records (unknown, not zero).
* no ``dynamic_resources`` (kubelet < 1.27, or its gate off): no claimed devices.
* ``Get`` answered ``UNIMPLEMENTED`` (kubelet < 1.27, or ``KubeletPodResourcesGet`` off):
  ``None``, and not asked again of that kubelet.
"""

from __future__ import annotations

import os
import stat
import threading
from collections.abc import Iterable

import grpc

from toposcope.host.podresources import api_pb2, api_pb2_grpc
from toposcope.host.podresources.records import (
    Allocatable,
    ClaimedDevice,
    ContainerAllocation,
    DeviceAllocation,
    MemoryAllocation,
    PodResources,
)
from toposcope.host.podresources.source import DEFAULT_SOCKET

#: Seconds one call may take; the kubelet answers from memory in milliseconds.
DEFAULT_TIMEOUT = 2.0
#: Largest answer accepted (as dcgm-exporter does: a node with many pods exceeds gRPC's 4 MiB).
MAX_MESSAGE_BYTES = 16 * 1024 * 1024


class KubeletUnavailable(Exception):
    """The kubelet's pod-resources API could not be asked; the message says why."""


def _nodes(topology: api_pb2.TopologyInfo) -> tuple[int, ...]:
    return tuple(sorted({int(node.ID) for node in topology.nodes}))


def _devices(items: Iterable[api_pb2.ContainerDevices]) -> tuple[DeviceAllocation, ...]:
    return tuple(
        DeviceAllocation(
            resource_name=item.resource_name,
            device_ids=tuple(item.device_ids),
            numa_nodes=_nodes(item.topology),
        )
        for item in items
    )


def _memory(items: Iterable[api_pb2.ContainerMemory]) -> tuple[MemoryAllocation, ...]:
    return tuple(
        MemoryAllocation(
            memory_type=item.memory_type,
            size_bytes=int(item.size),
            numa_nodes=_nodes(item.topology),
        )
        for item in items
    )


def _claimed(items: Iterable[api_pb2.DynamicResource]) -> tuple[ClaimedDevice, ...]:
    """Every device of every claim, in the kubelet's order (entries naming no device, which
    a driver of something other than devices would send, are skipped).
    """
    return tuple(
        ClaimedDevice(
            claim_namespace=claim.claim_namespace,
            claim_name=claim.claim_name,
            driver=resource.driver_name,
            pool=resource.pool_name,
            device=resource.device_name,
            cdi_devices=tuple(cdi.name for cdi in resource.cdi_devices),
            share_id=resource.share_id if resource.HasField("share_id") else "",
        )
        for claim in items
        for resource in claim.claim_resources
        if resource.driver_name and resource.device_name
    )


def _pod_containers(pod: api_pb2.PodResources) -> tuple[ContainerAllocation, ...]:
    return tuple(
        ContainerAllocation(
            namespace=pod.namespace,
            pod=pod.name,
            container=container.name,
            devices=_devices(container.devices),
            cpu_ids=tuple(sorted(int(cpu) for cpu in container.cpu_ids)),
            memory=_memory(container.memory),
            dynamic=_claimed(container.dynamic_resources),
        )
        for container in pod.containers
    )


def containers_of(answer: api_pb2.ListPodResourcesResponse) -> tuple[ContainerAllocation, ...]:
    """Every container of a ``List`` answer as records, in the kubelet's order."""
    return tuple(c for pod in answer.pod_resources for c in _pod_containers(pod))


def allocatable_of(answer: api_pb2.AllocatableResourcesResponse) -> Allocatable:
    """A ``GetAllocatableResources`` answer as a record."""
    return Allocatable(
        devices=_devices(answer.devices),
        cpu_ids=tuple(sorted(int(cpu) for cpu in answer.cpu_ids)),
        memory=_memory(answer.memory),
    )


class PodResourcesClient:
    """Asks the kubelet at ``socket`` for pod resources (see the module docstring).

    Thread-safe: the channel is created on the first call and replaced after a failure.
    """

    def __init__(self, socket: str = DEFAULT_SOCKET, timeout: float = DEFAULT_TIMEOUT) -> None:
        self.socket = socket
        self.timeout = timeout
        self._lock = threading.Lock()
        self._channel: grpc.Channel | None = None
        self._stub: api_pb2_grpc.PodResourcesListerStub | None = None
        self._allocatable_implemented = True
        self._get_implemented = True
        self._socket_id: tuple[int, int] | None = None

    def _connect(self) -> api_pb2_grpc.PodResourcesListerStub:
        """The stub on a live channel; :class:`KubeletUnavailable` when there is no socket."""
        try:
            found = os.stat(self.socket)
        except FileNotFoundError:
            self._drop()
            raise KubeletUnavailable(f"no kubelet socket at {self.socket}") from None
        except OSError as exc:
            self._drop()
            raise KubeletUnavailable(f"cannot reach {self.socket}: {exc.strerror}") from None
        if not stat.S_ISSOCK(found.st_mode):
            raise KubeletUnavailable(f"{self.socket} is not a socket")
        if (found.st_dev, found.st_ino) != self._socket_id:
            self._drop()
            self._socket_id = (found.st_dev, found.st_ino)
            self._allocatable_implemented = True
            self._get_implemented = True
        if self._stub is None:
            self._channel = grpc.insecure_channel(
                f"unix:{os.path.abspath(self.socket)}",
                options=[
                    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                    ("grpc.enable_http_proxy", 0),
                ],
            )
            self._stub = api_pb2_grpc.PodResourcesListerStub(self._channel)
        return self._stub

    def _drop(self) -> None:
        """Close the channel, so that the next call connects again."""
        if self._channel is not None:
            self._channel.close()
        self._channel = None
        self._stub = None
        self._socket_id = None

    def _failed(self, method: str, error: grpc.RpcError) -> KubeletUnavailable:
        self._drop()
        code = error.code() if isinstance(error, grpc.Call) else None
        details = error.details() if isinstance(error, grpc.Call) else str(error)
        name = code.name if code is not None else "error"
        return KubeletUnavailable(f"{method} on {self.socket}: {name}: {details}")

    def list(self) -> tuple[ContainerAllocation, ...]:
        """Every container's allocation (``List``)."""
        with self._lock:
            stub = self._connect()
            try:
                answer = stub.List(api_pb2.ListPodResourcesRequest(), timeout=self.timeout)
            except grpc.RpcError as exc:
                raise self._failed("List", exc) from None
        return containers_of(answer)

    def allocatable(self) -> Allocatable | None:
        """The node's allocatable resources, or ``None`` on a kubelet without the call."""
        with self._lock:
            if not self._allocatable_implemented:
                return None
            stub = self._connect()
            try:
                answer = stub.GetAllocatableResources(
                    api_pb2.AllocatableResourcesRequest(), timeout=self.timeout
                )
            except grpc.RpcError as exc:
                if isinstance(exc, grpc.Call) and exc.code() == grpc.StatusCode.UNIMPLEMENTED:
                    self._allocatable_implemented = False
                    return None
                raise self._failed("GetAllocatableResources", exc) from None
        return allocatable_of(answer)

    def get(self, namespace: str, pod: str) -> tuple[ContainerAllocation, ...] | None:
        """One pod's containers (``Get``); ``None`` on a kubelet without the call.

        A pod the kubelet does not know is :class:`KubeletUnavailable` (``NOT_FOUND``).
        """
        with self._lock:
            if not self._get_implemented:
                return None
            stub = self._connect()
            request = api_pb2.GetPodResourcesRequest(pod_name=pod, pod_namespace=namespace)
            try:
                answer = stub.Get(request, timeout=self.timeout)
            except grpc.RpcError as exc:
                if isinstance(exc, grpc.Call) and exc.code() == grpc.StatusCode.UNIMPLEMENTED:
                    self._get_implemented = False
                    return None
                raise self._failed("Get", exc) from None
        return _pod_containers(answer.pod_resources)

    def read(self) -> PodResources:
        """One full answer: ``List``, then ``GetAllocatableResources`` where implemented."""
        containers = self.list()
        return PodResources(containers, self.allocatable())

    def close(self) -> None:
        """Close the channel (the client may still be used: it reconnects)."""
        with self._lock:
            self._drop()
