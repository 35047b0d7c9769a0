"""The kubelet's pod-resources service, served in-process on a unix socket for the tests.

A real gRPC server speaking the repository's ``api.proto`` (the same stubs the exporter's
client uses), answering ``List``, ``GetAllocatableResources`` and ``Get`` from the fixture
files in ``tests/fixtures/podresources/``, which hold what a GPU node's kubelet answers
(``GPU_NODE_DRA``: its GPUs handed out through ResourceClaims, in ``dynamic_resources``). It
can stand for a kubelet before 1.21 (``GetAllocatableResources`` answers ``UNIMPLEMENTED``)
or before 1.27 (``Get`` answers ``UNIMPLEMENTED``) and can be stopped and started again on the
same path, as a kubelet restart does.
"""

from __future__ import annotations

import json
import threading
from concurrent import futures
from pathlib import Path
from types import TracebackType

import grpc
from google.protobuf import json_format

from tests.helpers import FIXTURES
from toposcope.host.podresources import api_pb2, api_pb2_grpc

PODRESOURCES = FIXTURES / "podresources"
#: a GPU node: a Guaranteed pod with 2 GPUs and exclusive CPUs, a BestEffort pod
GPU_NODE = PODRESOURCES / "gpu-node.json"
#: the same node's kubelet at 1.21: no memory in either answer
GPU_NODE_121 = PODRESOURCES / "gpu-node-1.21.json"
#: the same node with DRA: the trainer's two GPUs and nginx's MIG device from ResourceClaims
GPU_NODE_DRA = PODRESOURCES / "gpu-node-dra.json"
#: the host tree (--root) of that node, with containerd's state directory
NODE_ROOT = PODRESOURCES / "node"
CRIO_STATE = PODRESOURCES / "crio-state"


def load_answers(
    path: Path,
) -> tuple[api_pb2.ListPodResourcesResponse, api_pb2.AllocatableResourcesResponse]:
    """The ``List`` and ``GetAllocatableResources`` answers of a fixture file."""
    data = json.loads(path.read_text(encoding="utf-8"))
    listing = json_format.ParseDict(data["list"], api_pb2.ListPodResourcesResponse())
    allocatable = json_format.ParseDict(data["allocatable"], api_pb2.AllocatableResourcesResponse())
    return listing, allocatable


class _Lister(api_pb2_grpc.PodResourcesListerServicer):
    def __init__(self, server: PodResourcesServer) -> None:
        self.server = server

    def List(
        self, request: api_pb2.ListPodResourcesRequest, context: grpc.ServicerContext
    ) -> api_pb2.ListPodResourcesResponse:
        self.server.calls.append("List")
        if not self.server.answer_now.wait(timeout=30):
            context.abort(grpc.StatusCode.INTERNAL, "test server held too long")
        return self.server.listing

    def GetAllocatableResources(
        self, request: api_pb2.AllocatableResourcesRequest, context: grpc.ServicerContext
    ) -> api_pb2.AllocatableResourcesResponse:
        self.server.calls.append("GetAllocatableResources")
        if not self.server.allocatable_implemented:
            context.abort(grpc.StatusCode.UNIMPLEMENTED, "unknown method GetAllocatableResources")
        return self.server.allocatable

    def Get(
        self, request: api_pb2.GetPodResourcesRequest, context: grpc.ServicerContext
    ) -> api_pb2.GetPodResourcesResponse:
        self.server.calls.append("Get")
        if not self.server.get_implemented:
            context.abort(grpc.StatusCode.UNIMPLEMENTED, "unknown method Get")
        for pod in self.server.listing.pod_resources:
            if (pod.namespace, pod.name) == (request.pod_namespace, request.pod_name):
                return api_pb2.GetPodResourcesResponse(pod_resources=pod)
        context.abort(
            grpc.StatusCode.NOT_FOUND,
            f"pod {request.pod_name} in namespace {request.pod_namespace} not found",
        )


class PodResourcesServer:
    """Serves the fixture's answers on ``socket`` while started (a context manager).

    ``allocatable_implemented=False`` answers ``GetAllocatableResources`` with
    ``UNIMPLEMENTED``, as a kubelet before 1.21 does; ``get_implemented=False`` answers ``Get``
    so, as a kubelet before 1.27 does. ``calls`` lists the methods asked, in
    order. Clearing ``answer_now`` holds ``List`` until it is set again (a hung kubelet).
    """

    def __init__(
        self,
        socket: Path,
        fixture: Path = GPU_NODE,
        *,
        allocatable_implemented: bool = True,
        get_implemented: bool = True,
    ) -> None:
        self.socket = socket
        self.listing, self.allocatable = load_answers(fixture)
        self.allocatable_implemented = allocatable_implemented
        self.get_implemented = get_implemented
        self.calls: list[str] = []
        self.answer_now = threading.Event()
        self.answer_now.set()
        self._server: grpc.Server | None = None

    def start(self) -> PodResourcesServer:
        """Listen on the socket (a new socket file, as a starting kubelet makes)."""
        self.socket.unlink(missing_ok=True)
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        api_pb2_grpc.add_PodResourcesListerServicer_to_server(_Lister(self), server)
        server.add_insecure_port(f"unix:{self.socket}")
        server.start()
        self._server = server
        return self

    def stop(self) -> None:
        """Stop serving and remove the socket file, as a stopping kubelet does."""
        self.answer_now.set()
        if self._server is not None:
            self._server.stop(grace=None).wait(timeout=10)
            self._server = None
        self.socket.unlink(missing_ok=True)

    def __enter__(self) -> PodResourcesServer:
        return self.start()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.stop()
