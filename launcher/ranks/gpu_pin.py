"""Pinning a rank to its GPU before CUDA starts in it: what the rank wrapper (rank_exec.py) puts
into its child's environment.

Every local rank of a host gets the same ``CUDA_VISIBLE_DEVICES``: the uuids of the devices its
host's ranks drive, in CUDA's order as the user left it, so local rank k drives CUDA device k
whatever ``CUDA_DEVICE_ORDER`` the rank runs under, its peers stay visible (CUDA IPC between
local ranks maps their memory) and Horovod's ``gpus[hvd.local_rank()]`` is the rank's GPU. A
list of MIG instances gives each rank its own (CUDA shows one per process). The rule itself is
:func:`blinkflow.topology.visible_devices.pin_for_local_rank`; ``BLINKFLOW_PIN_GPUS=0`` turns
this off.
"""
from __future__ import annotations

from typing import Callable, Dict, List, Mapping, Optional, Tuple

from blinkflow.config import Config
from blinkflow.errors import ConfigError
from blinkflow.topology.visible_devices import GpuIdentity, Pin, describe, is_mig, pin_for_local_rank, visible_entries

LOCAL_RANK_VARS = ("OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID")
LOCAL_SIZE_VARS = ("OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS")
VISIBLE = "CUDA_VISIBLE_DEVICES"


def _env_int(environ: Mapping[str, str], names, default: int) -> int:
    for name in names:
        value = environ.get(name, "")
        if value.isdigit():
            return int(value)
    return default


def _cuda_devices() -> Optional[List[GpuIdentity]]:
    from blinkflow.topology.probe import cuda_devices
    return cuda_devices()


def gpu_pin(environ: Mapping[str, str],
            cuda_source: Callable[[], Optional[List[GpuIdentity]]] = _cuda_devices) -> Tuple[Dict[str, str], Optional[Pin]]:
    """``(variables to set in the rank's environment, the pin)`` for the rank whose launch
    environment is ``environ``; ``({}, None)`` when pinning is off. CUDA is asked (through
    ``cuda_source``) only when the user's list is not all MIG instances."""
    try:
        enabled = Config.from_env(environ).pin_gpus
    except ConfigError:
        enabled = 1  # the rank's init() reports a bad setting; pinning stays on
    if not enabled:
        return {}, None
    local_rank = _env_int(environ, LOCAL_RANK_VARS, 0)
    local_size = _env_int(environ, LOCAL_SIZE_VARS, 1)
    visible = environ.get(VISIBLE)
    entries = visible_entries(visible)
    devices = None if entries and all(is_mig(e) for e in entries) else cuda_source()
    pin = pin_for_local_rank(local_rank, local_size, visible, devices)
    return ({VISIBLE: pin.visible} if pin.visible is not None else {}), pin


def pin_summary(pin: Pin) -> str:
    """``CUDA device k: <name, PCI bus id, uuid>`` (the ordinal as numbered inside the rank)."""
    if pin.ordinal is None:
        return pin.reason
    what = describe(pin.device) if pin.device is not None else pin.visible
    return f"CUDA device {pin.ordinal}: {what} ({pin.reason})"


def pin_line(pin: Pin, rank: int, local_rank: int, host: str) -> str:
    """What ``blinkrun --verbose`` prints for one rank."""
    shown = f"; CUDA_VISIBLE_DEVICES={pin.visible}" if pin.visible is not None else ""
    return f"blinkrun: rank {rank} (local rank {local_rank} on {host}) drives {pin_summary(pin)}{shown}\n"
