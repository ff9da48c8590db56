"""Whether this rank can write straight into a local peer's GPU memory, or must stage through
host memory.

A CUDA IPC handle opens only on a GPU that can access the owner's peer-to-peer (NVLink, or a PCIe
switch that allows it): on a DGX-1 half the pairs cannot, and a device maps at most
:data:`PEER_LIMIT` peers. Ranks sharing one GPU always map each other. The answer is asked of
CUDA (``cudaDeviceCanAccessPeer``) where the peer's GPU is visible to this process; where it is
not (one GPU per process, ``CUDA_VISIBLE_DEVICES`` narrowed), opening the handle is the question.
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
        self._visible = visible_bus_ids(runtime)
        self._mapped_gpus = set()

    def can_map(self, peer_bus_id: str) -> Optional[bool]:
        """True: map; False: stage; None: CUDA cannot be asked here (try to open the handle)."""
        peer_bus_id = peer_bus_id.lower()
        if peer_bus_id == self.bus_id:
            return True
        if peer_bus_id not in self._mapped_gpus and len(self._mapped_gpus) >= PEER_LIMIT:
            return False
        ordinal = self._visible.get(peer_bus_id)
        if ordinal is None:
            return None
        return bool(self.runtime.deviceCanAccessPeer(self.device, ordinal))

    def mapped(self, peer_bus_id: str) -> None:
        if peer_bus_id.lower() != self.bus_id:
            self._mapped_gpus.add(peer_bus_id.lower())
