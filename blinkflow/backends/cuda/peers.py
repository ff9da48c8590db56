"""Whether this rank can write straight into a local peer's GPU memory, or must stage through
host memory.

A CUDA IPC handle opens only on a GPU that can access the owner's peer-to-peer (NVLink, or a PCIe
switch that allows it): on a DGX-1 half the pairs cannot, and a device maps at most
:data:`PEER_LIMIT` peers. Ranks sharing one GPU always map each other. The answer is asked of
CUDA (``cudaDeviceCanAccessPeer``) where the peer's GPU is visible to this process; where it is
not (one GPU per process, ``CUDA_VISIBLE_DEVICES`` narrowed), opening the handle is the question.

A GPU is named by its PCI bus id and its uuid (:attr:`PeerRoutes.gpu`): MIG instances of one GPU
report their parent's bus id but each its own uuid, and CUDA IPC does not work between MIG
instances, so two ranks on one bus with different uuids stage through the host (the runner), never
map each other. Ranks on the same GPU (or the same MIG instance) share bus id and uuid.
"""
from __future__ import annotations

from typing import Dict, Optional

PEER_LIMIT = 8
"""GPUs one device can map at once (cudaErrorTooManyPeers past it)."""


def visible_bus_ids(runtime) -> Dict[str, int]:
    """PCI bus id -> CUDA ordinal of every GPU this process sees."""
    return {runtime.deviceGetPCIBusId(i).lower(): i for i in range(runtime.getDeviceCount())}


class PeerRoutes:
    """Decides, receiver by receiver, whether to map its memory; remembers the peer GPUs mapped."""

    def __init__(self, runtime, device: int):
        self.runtime = runtime
        self.device = device
        self.bus_id = runtime.deviceGetPCIBusId(device).lower()
        self.gpu = gpu_name(self.bus_id, runtime.getDeviceProperties(device).get("uuid", b""))
        """``bus id/uuid``: what local peers compare to tell the same GPU from another."""
        self._visible = visible_bus_ids(runtime)
        self._mapped_gpus = set()

    def can_map(self, peer_gpu: str) -> Optional[bool]:
        """True: map; False: stage; None: CUDA cannot be asked here (try to open the handle).
        ``peer_gpu`` is the peer's :attr:`gpu` (or a bare bus id: then the bus decides)."""
        peer_gpu = peer_gpu.lower()
        peer_bus_id, named, _ = peer_gpu.partition("/")
        if peer_gpu == self.gpu or (not named and peer_bus_id == self.bus_id):
            return True
        if peer_bus_id == self.bus_id:
            return False  # another MIG instance of this GPU: CUDA IPC does not work between them
        if peer_bus_id not in self._mapped_gpus and len(self._mapped_gpus) >= PEER_LIMIT:
            return False
        ordinal = self._visible.get(peer_bus_id)
        if ordinal is None:
            return None
        return bool(self.runtime.deviceCanAccessPeer(self.device, ordinal))

    def mapped(self, peer_gpu: str) -> None:
        peer_bus_id = peer_gpu.lower().partition("/")[0]
        if peer_bus_id != self.bus_id:
            self._mapped_gpus.add(peer_bus_id)


def ipc_works(gpu: str, peer_gpu: str) -> bool:
    """Whether CUDA IPC can work between the GPUs named ``gpu`` and ``peer_gpu`` (their
    :attr:`PeerRoutes.gpu`): not between two MIG instances of one GPU (one bus, two uuids), whose
    ranks exchange through the host over MPI instead."""
    return gpu.lower() == peer_gpu.lower() or gpu.lower().partition("/")[0] != peer_gpu.lower().partition("/")[0]


def gpu_name(bus_id: str, uuid) -> str:
    """``bus id/uuid hex``: one name per GPU, and per MIG instance of a GPU."""
    raw = uuid if isinstance(uuid, (bytes, bytearray)) else str(uuid or "").encode()
    return f"{bus_id.lower()}/{bytes(raw).hex()}"
