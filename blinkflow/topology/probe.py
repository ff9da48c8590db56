"""Reading this machine's GPUs: NVML through ``pynvml`` when importable, else ``nvidia-smi``.

Both sources produce the text of ``nvidia-smi topo -m`` (NVML's answers are written in that
table's vocabulary), so a single parser (:mod:`.nvidia_smi`) interprets them and a probe can be
replayed offline from its text. Nothing here parses; nothing elsewhere runs ``nvidia-smi``
(so every parse is tested on captured output).

NVML calls used (NVML API reference, "Device Queries" and "NvLink Methods"):
``nvmlDeviceGetCount``, ``nvmlDeviceGetHandleByIndex``, ``nvmlDeviceGetPciInfo``,
``nvmlDeviceGetNvLinkState`` / ``nvmlDeviceGetNvLinkRemotePciInfo`` per link, and
``nvmlDeviceGetTopologyCommonAncestor`` whose levels map onto nvidia-smi's words (SINGLE → PIX,
MULTIPLE → PXB, HOSTBRIDGE → PHB, NODE → NODE, SYSTEM → SYS).
"""
from __future__ import annotations

import importlib
import os
import shutil
import subprocess
from typing import Callable, Dict, List, Mapping, Optional

from ..errors import TopologyError
from .model import Topology
from .nvidia_smi import parse_smi_matrix, topology_from_nvidia_smi
from .visible_devices import (GpuIdentity, device_ordinal, format_uuid, normalise_bus_id, resolve_entries,
                              smi_index, visible_entries)

#: NVML_TOPOLOGY_* levels -> the cell nvidia-smi prints for them.
NVML_LEVEL_CELLS = {0: "PIX", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}
#: NVML_NVLINK_MAX_LINKS of recent drivers (H100 has 18 links).
NVML_MAX_LINKS = 18


def visible_gpus(environ: Optional[Mapping[str, str]] = None,
                 host_ids: Optional[Callable[[], Optional[List[GpuIdentity]]]] = None) -> Optional[List[int]]:
    """``nvidia-smi`` indices of the GPUs ``CUDA_VISIBLE_DEVICES`` lists, in its order (None when
    it is unset). Indices and ``GPU-<uuid>`` entries are mapped to the host's GPUs by
    :func:`~.visible_devices.resolve_entries`; ``host_ids`` (default :func:`host_gpu_ids`) is
    only asked when an entry is a uuid.

    CUDA's own variable, not a blinkflow setting, so it is read here rather than by the config
    object."""
    environ = os.environ if environ is None else environ
    entries = visible_entries(environ.get("CUDA_VISIBLE_DEVICES"))
    if entries is None:
        return None
    if all(e.isdigit() for e in entries):
        return [int(e) for e in entries]
    host = (host_ids or host_gpu_ids)()
    if host is None:
        raise TopologyError("it names GPUs by uuid, and neither NVML nor nvidia-smi could list this host's "
                            "uuids", "CUDA_VISIBLE_DEVICES")
    return [smi_index(g, host) for g in resolve_entries(entries, host)]


def cuda_devices() -> Optional[List[GpuIdentity]]:
    """The devices CUDA enumerates in this process, in ordinal order (after CUDA_VISIBLE_DEVICES
    and CUDA_DEVICE_ORDER), or None when CuPy cannot ask CUDA. Asking initialises the CUDA driver
    but creates no context on any device."""
    try:
        import cupy

        runtime = cupy.cuda.runtime
        count = runtime.getDeviceCount()
        out = []
        for ordinal in range(count):
            props = runtime.getDeviceProperties(ordinal)
            name = props.get("name", b"")
            out.append(GpuIdentity(normalise_bus_id(runtime.deviceGetPCIBusId(ordinal)),
                                   format_uuid(props.get("uuid", b"")),
                                   name.decode(errors="replace") if isinstance(name, bytes) else str(name)))
        return out
    except Exception:  # ImportError, no driver (CUDARuntimeError), an odd bus id
        return None


def host_gpu_ids(run: Callable = subprocess.run) -> Optional[List[GpuIdentity]]:
    """Every GPU of this host in ``nvidia-smi`` order (PCI bus order), whatever
    CUDA_VISIBLE_DEVICES says: NVML when importable, else ``nvidia-smi --query-gpu``. None when
    neither answers."""
    try:
        nvml = importlib.import_module("pynvml")
    except ImportError:
        nvml = None
    if nvml is not None:
        try:
            nvml.nvmlInit()
            try:
                out = []
                for i in range(nvml.nvmlDeviceGetCount()):
                    handle = nvml.nvmlDeviceGetHandleByIndex(i)
                    uuid = nvml.nvmlDeviceGetUUID(handle)
                    out.append(GpuIdentity(normalise_bus_id(nvml.nvmlDeviceGetPciInfo(handle).busId),
                                           uuid.decode() if isinstance(uuid, bytes) else str(uuid)))
                return out
            finally:
                nvml.nvmlShutdown()
        except Exception:  # NVMLError: let nvidia-smi have a go
            pass
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        done = run([exe, "--query-gpu=pci.bus_id,uuid,name", "--format=csv,noheader"],
                   capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return parse_query_gpu(done.stdout) if done.returncode == 0 else None


def parse_query_gpu(text: str) -> List[GpuIdentity]:
    """``nvidia-smi --query-gpu=pci.bus_id,uuid,name --format=csv,noheader`` lines."""
    out = []
    for line in text.splitlines():
        if line.strip():
            bus, uuid, name = (part.strip() for part in (line.split(",", 2) + ["", ""])[:3])
            out.append(GpuIdentity(normalise_bus_id(bus), uuid, name))
    return out


def host_gpu_text(run: Callable = subprocess.run) -> Optional[str]:
    """``nvidia-smi topo -m`` text for this machine, or None when it has no NVIDIA GPU."""
    try:
        nvml = importlib.import_module("pynvml")
    except ImportError:
        nvml = None
    if nvml is not None:
        text = nvml_topology_text(nvml)
        if text is not None:
            return text
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        done = run([exe, "topo", "-m"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    # nvidia-smi without a working driver exits non-zero: treat the machine as GPU-less.
    return done.stdout if done.returncode == 0 and "GPU0" in done.stdout else None


def nvml_topology_text(nvml) -> Optional[str]:
    """Write NVML's view of the GPUs as an ``nvidia-smi topo -m`` table (GPU rows only).

    Like nvidia-smi, a GPU pair joined through NVSwitches shows ``NV#`` with # the links each
    GPU has to the switches. Returns None when NVML fails or finds no GPU.
    """
    try:
        nvml.nvmlInit()
    except Exception:  # NVMLError_LibraryNotFound, driver missing: fall back to nvidia-smi
        return None
    try:
        count = nvml.nvmlDeviceGetCount()
        if count == 0:
            return None
        handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        bus = [_bus_id(nvml.nvmlDeviceGetPciInfo(h).busId) for h in handles]
        peers = [_nvlink_peers(nvml, h) for h in handles]
        to_switch = [sum(n for b, n in p.items() if b not in bus) for p in peers]
        lines = ["\t" + "\t".join(f"GPU{i}" for i in range(count))]
        for i in range(count):
            cells = []
            for j in range(count):
                if i == j:
                    cells.append("X")
                elif peers[i].get(bus[j]):
                    cells.append(f"NV{peers[i][bus[j]]}")
                elif to_switch[i] and to_switch[j]:
                    cells.append(f"NV{min(to_switch[i], to_switch[j])}")
                else:
                    level = nvml.nvmlDeviceGetTopologyCommonAncestor(handles[i], handles[j])
                    cells.append(NVML_LEVEL_CELLS.get(int(level), "SYS"))
            lines.append(f"GPU{i}\t" + "\t".join(cells))
        return "\n".join(lines) + "\n"
    except Exception:  # any NVMLError: let nvidia-smi have a go
        return None
    finally:
        try:
            nvml.nvmlShutdown()
        except Exception:
            pass


def _nvlink_peers(nvml, handle) -> Dict[str, int]:
    """Remote PCI bus id -> number of active NVLinks from this GPU to it."""
    peers: Dict[str, int] = {}
    for link in range(NVML_MAX_LINKS):
        try:
            if nvml.nvmlDeviceGetNvLinkState(handle, link) != nvml.NVML_FEATURE_ENABLED:
                continue
            remote = _bus_id(nvml.nvmlDeviceGetNvLinkRemotePciInfo(handle, link).busId)
        except Exception:  # NVML_ERROR_INVALID_ARGUMENT past the GPU's last link
            continue
        peers[remote] = peers.get(remote, 0) + 1
    return peers


def _bus_id(raw) -> str:
    text = raw.decode() if isinstance(raw, bytes) else str(raw)
    domain, _, rest = text.lower().partition(":")
    return f"{int(domain, 16):08x}:{rest}" if rest else text.lower()


def probe_host_topology(host: str = "localhost", text_source: Callable[[], Optional[str]] = host_gpu_text
                        ) -> Optional[Topology]:
    """This machine's GPU topology (GPU ids = nvidia-smi indices), or None without GPUs."""
    text = text_source()
    if text is None:
        return None
    return topology_from_nvidia_smi(text, where="nvidia-smi topo -m", name=host, host=host)


def probe_gpu(backend: str, forced_topology: bool, local_rank: int, environ: Optional[Mapping[str, str]] = None,
              gpu_text_source: Callable[[], Optional[str]] = host_gpu_text,
              cuda_source: Callable[[], Optional[List[GpuIdentity]]] = cuda_devices,
              ids_source: Callable[[], Optional[List[GpuIdentity]]] = host_gpu_ids):
    """``(gpu, table text)`` of the rank with ``local_rank`` on this host, or ``(None, None)`` for
    a CPU rank: no probing under ``BLINKFLOW_BACKEND=cpu`` or a given topology; no GPU here.

    The rank drives CUDA device ``local_rank`` (device 0 when it sees one: a private GPU, or
    ranks sharing one, which the merge refuses) and ``gpu`` is that device's ``nvidia-smi``
    index, found by PCI bus id (:mod:`.visible_devices`). Without CuPy to ask CUDA, the GPUs
    CUDA_VISIBLE_DEVICES names are resolved against the host's list instead."""
    if backend == "cpu" or forced_topology:
        return None, None
    text = gpu_text_source()
    if text is None:
        if backend == "cuda":
            raise TopologyError("BLINKFLOW_BACKEND=cuda but this host has no NVIDIA GPU (no NVML, no "
                                "nvidia-smi); use BLINKFLOW_BACKEND=cpu or auto", "GPU probe")
        return None, None
    devices = cuda_source()
    if devices is not None:
        if not devices:
            return None, None
        host = ids_source()
        if host is None:
            raise TopologyError("CUDA sees GPUs but neither NVML nor nvidia-smi lists their PCI bus ids, "
                                "which map them onto the `nvidia-smi topo -m` table", "GPU probe")
        return smi_index(devices[device_ordinal(local_rank, len(devices))], host), text
    visible = visible_gpus(environ, ids_source)
    if visible is None:
        visible = [int(label[3:]) for label in parse_smi_matrix(text, "nvidia-smi topo -m").gpu_labels]
    if not visible:
        return None, None
    return visible[device_ordinal(local_rank, len(visible))], text
