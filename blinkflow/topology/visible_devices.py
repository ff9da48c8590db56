"""Which GPU each local rank drives, named by PCI bus id and uuid (pure: no CUDA, no MPI).

The rule, everywhere (``blinkrun``, plain ``mpirun``, Horovod's
``tf.config.set_visible_devices(gpus[hvd.local_rank()])``): **local rank k drives CUDA device k**
of the devices the process sees, in CUDA's own order (``CUDA_VISIBLE_DEVICES`` as the user wrote
it, read under ``CUDA_DEVICE_ORDER``). Its id in the topology is the index ``nvidia-smi`` gives
the same physical GPU, found through the PCI bus id; never the CUDA ordinal, which differs under
``CUDA_DEVICE_ORDER=FASTEST_FIRST`` (CUDA's default) on mixed boxes or a permuted
``CUDA_VISIBLE_DEVICES``.

``blinkrun`` freezes that numbering before CUDA starts in a rank: every rank of a host gets the
same ``CUDA_VISIBLE_DEVICES``, the uuids of the host's first ``local size`` devices in CUDA's
order (:func:`pin_for_local_rank`). Every local rank keeps seeing its peers' GPUs, which CUDA IPC
and peer access between local ranks need, and ``gpus[local_rank]`` stays the rank's GPU. MIG
instances are the exception: a CUDA process enumerates one MIG instance only, so each rank gets
its own entry.
"""
from __future__ import annotations

import dataclasses
import re
from typing import List, Optional, Sequence

from ..errors import TopologyError

WHERE = "CUDA_VISIBLE_DEVICES"


@dataclasses.dataclass(frozen=True)
class GpuIdentity:
    """One GPU (or MIG instance) as a process sees it."""

    bus_id: str
    """PCI bus id, normalised by :func:`normalise_bus_id`."""
    uuid: str
    """``GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`` (``MIG-...`` for a MIG instance), or ''."""
    name: str = ""


@dataclasses.dataclass(frozen=True)
class Pin:
    """What a launcher does for one local rank before its process starts."""

    visible: Optional[str]
    """The ``CUDA_VISIBLE_DEVICES`` to give the rank, or None to leave the variable as it is."""
    ordinal: Optional[int]
    """The CUDA device the rank will drive, as numbered inside the rank (None: no GPU for it)."""
    device: Optional[GpuIdentity]
    """That device, or None when it is not known here."""
    reason: str
    """One line for ``blinkrun --verbose``."""


def normalise_bus_id(text) -> str:
    """``00000000:1B:00.0`` (NVML), ``0000:1b:00.0`` (CUDA) -> ``0000:1b:00.0``: a lower-case
    four-digit domain, whatever the width the source printed."""
    raw = text.decode() if isinstance(text, bytes) else str(text)
    raw = raw.strip().lower()
    match = re.fullmatch(r"(?:([0-9a-f]+):)?([0-9a-f]+):([0-9a-f]+)\.([0-9a-f]+)", raw)
    if not match:
        raise TopologyError(f"{raw!r} is not a PCI bus id (domain:bus:device.function)", "GPU probe")
    domain, bus, device, function = (int(g or "0", 16) for g in match.groups())
    return f"{domain:04x}:{bus:02x}:{device:02x}.{function:x}"


def format_uuid(raw) -> str:
    """CUDA's 16 raw bytes of ``cudaDeviceProp.uuid`` as ``GPU-8-4-4-4-12`` hex (as nvidia-smi
    and ``CUDA_VISIBLE_DEVICES`` write it); text is returned as it is."""
    if isinstance(raw, (bytes, bytearray)) and len(raw) == 16:
        h = bytes(raw).hex()
        return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
    if isinstance(raw, (bytes, bytearray)):
        return bytes(raw).decode(errors="replace").strip("\0")
    return str(raw or "")


def visible_entries(raw: Optional[str]) -> Optional[List[str]]:
    """The entries of a ``CUDA_VISIBLE_DEVICES`` value as CUDA reads them (None when unset).

    Entries are indices, ``GPU-<uuid>`` (a unique prefix is enough) or ``MIG-<uuid>`` (also the
    older ``MIG-GPU-<uuid>/<gi>/<ci>``). Like CUDA, the list ends at the first entry that is none
    of these (a negative index hides everything after it)."""
    if raw is None:
        return None
    out: List[str] = []
    for token in (t.strip() for t in raw.split(",")):
        if re.fullmatch(r"[0-9]+", token) or re.fullmatch(r"(GPU|MIG)-[0-9A-Za-z/-]+", token):
            out.append(token)
        else:
            break
    return out


def is_mig(entry: str) -> bool:
    return entry.startswith("MIG-")


def resolve_entries(entries: Sequence[str], host_gpus: Sequence[GpuIdentity]) -> List[GpuIdentity]:
    """The host GPUs that ``entries`` name, in their order, when CUDA cannot be asked.

    ``host_gpus`` are the host's GPUs in ``nvidia-smi`` order, which is PCI bus order. An index
    is read in that order: exact under ``CUDA_DEVICE_ORDER=PCI_BUS_ID``, and under CUDA's
    default ``FASTEST_FIRST`` on a box of identical GPUs (CUDA breaks ties by bus id). A uuid
    may be a prefix, as CUDA allows, but must name one GPU. MIG entries need CUDA's own view.
    """
    out: List[GpuIdentity] = []
    for entry in entries:
        if is_mig(entry):
            raise TopologyError(f"entry {entry!r} is a MIG instance, which only CUDA can map to its GPU; "
                                "install CuPy (pip install 'blinkflow[gpu]') or list GPUs instead", WHERE)
        if entry.isdigit():
            index = int(entry)
            if index >= len(host_gpus):
                break  # CUDA stops at the first index it does not have
            out.append(host_gpus[index])
            continue
        matches = [g for g in host_gpus if g.uuid.lower().startswith(entry.lower())]
        if len(matches) != 1:
            what = "no GPU" if not matches else f"{len(matches)} GPUs"
            raise TopologyError(f"entry {entry!r} names {what} of this host "
                                f"({', '.join(g.uuid for g in host_gpus) or 'none'}); give a full uuid", WHERE)
        out.append(matches[0])
    return out


def smi_index(device: GpuIdentity, host_gpus: Sequence[GpuIdentity]) -> int:
    """The ``nvidia-smi`` index of the physical GPU ``device`` is (or is a MIG instance of),
    found by PCI bus id."""
    for index, gpu in enumerate(host_gpus):
        if gpu.bus_id == device.bus_id:
            return index
    raise TopologyError(f"CUDA device at PCI {device.bus_id} is not among this host's GPUs "
                        f"({', '.join(g.bus_id for g in host_gpus)})", "GPU probe")


def no_gpu_for(local_rank: int, count: int) -> TopologyError:
    """The error for a local rank beyond the GPUs its process sees, with the two ways out."""
    return TopologyError(f"local rank {local_rank} has no GPU: its process sees {count} (CUDA_VISIBLE_DEVICES); "
                         f"launch at most {count} ranks per host, or set BLINKFLOW_BACKEND=cpu "
                         "(blinkrun --backend cpu) to run on the CPUs", "GPU probe")


def device_ordinal(local_rank: int, count: int) -> int:
    """The CUDA device local rank ``local_rank`` drives among ``count`` visible ones: its own
    index; with one device visible (a private GPU per rank, or ranks sharing one) device 0."""
    if count <= 0:
        raise TopologyError("no CUDA device is visible", "GPU probe")
    if count == 1:
        return 0
    if local_rank >= count:
        raise no_gpu_for(local_rank, count)
    return local_rank


def pin_for_local_rank(local_rank: int, local_size: int, visible: Optional[str],
                       cuda_devices: Optional[Sequence[GpuIdentity]]) -> Pin:
    """What ``blinkrun`` gives local rank ``local_rank`` of ``local_size``.

    ``visible`` is the user's ``CUDA_VISIBLE_DEVICES`` (None: unset); ``cuda_devices`` what CUDA
    enumerates under it, in ordinal order (None: CUDA could not be asked, e.g. no CuPy).
    """
    entries = visible_entries(visible)
    if entries and all(is_mig(e) for e in entries):
        if local_rank >= len(entries):
            return Pin(None, None, None, f"no MIG instance left for local rank {local_rank} "
                                         f"({len(entries)} listed); the rank's init() will refuse")
        return Pin(entries[local_rank], 0, None, "one MIG instance per process")
    if cuda_devices is None:
        return Pin(None, None, None, "GPUs not pinned: CUDA cannot be asked here (no CuPy)")
    count = len(cuda_devices)
    if count == 0:
        return Pin(None, None, None, "no CUDA device visible: a CPU rank")
    if local_size > count:
        shared = "all share device 0" if count == 1 else "init() refuses unless BLINKFLOW_TOPOLOGY is given"
        return Pin(None, local_rank % count, cuda_devices[local_rank % count],
                   f"{local_size} local ranks on {count} CUDA device(s): {shared}")
    pinned = ",".join(d.uuid for d in cuda_devices[:local_size])
    if not all(d.uuid for d in cuda_devices[:local_size]):
        pinned = None  # a device without a uuid cannot be named: leave the user's numbering
    device = cuda_devices[local_rank]
    return Pin(pinned, local_rank, device, f"local rank {local_rank} of {local_size}")


def describe(device: Optional[GpuIdentity]) -> str:
    if device is None:
        return "?"
    parts = [p for p in (device.name, f"PCI {device.bus_id}", device.uuid) if p]
    return ", ".join(parts)
