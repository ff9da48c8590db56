"""``blinkrun --check-build``: what this installation can use, like ``horovodrun --check-build``.

Every probe is lazy and guarded: a missing or broken package shows as ``[ ]`` with the reason,
never as a crash. Versions come from package metadata where possible, so TensorFlow is not
imported (seconds) and mpi4py.MPI is not imported (that would initialise MPI).
"""
from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import shutil
import subprocess
from typing import Callable, List, Optional, Tuple

Probe = Callable[[], Tuple[bool, str]]


def _dist_version(*names: str) -> Optional[str]:
    for name in names:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def _package(module: str, *dists: str) -> Probe:
    def probe():
        if importlib.util.find_spec(module) is None:
            return False, "not installed"
        version = _dist_version(*dists) or getattr(importlib.import_module(module), "__version__", "")
        return True, version
    return probe


def _mpi() -> Tuple[bool, str]:
    from ..job.mpi_impl import detect
    impl = detect()
    return True, impl.describe()


def _cupy() -> Tuple[bool, str]:
    from .cuda_extra import cuda_major, extra_for
    major, source = cuda_major()
    extra = extra_for(major)
    if importlib.util.find_spec("cupy") is None:
        if extra:
            return False, f"not installed (pip install 'blinkflow[{extra}]' for this machine's CUDA {major})"
        return False, "not installed (pip install 'blinkflow[gpu-cuda12]', or [gpu-cuda13] on CUDA 13)"
    import cupy
    built_for = cupy.cuda.runtime.runtimeGetVersion() // 1000
    if major is not None and built_for != major:
        fix = f"pip install 'blinkflow[{extra}]'" if extra else "install the CuPy built for it"
        return False, (f"{cupy.__version__}, built for CUDA {built_for}, but this machine has CUDA {major} "
                       f"({source}): {fix}")
    return True, cupy.__version__


def _cuda() -> Tuple[bool, str]:
    if importlib.util.find_spec("cupy") is not None:
        import cupy
        runtime = cupy.cuda.runtime.runtimeGetVersion()
        count = cupy.cuda.runtime.getDeviceCount()
        return count > 0, f"runtime {runtime // 1000}.{runtime % 1000 // 10}, {count} device(s)"
    nvcc = shutil.which("nvcc")
    if nvcc:
        out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=20).stdout
        release = next((l.split("release", 1)[1].split(",")[0].strip() for l in out.splitlines() if "release" in l), "?")
        return False, f"toolkit {release} (nvcc) found, but CuPy is missing to use it"
    return False, "no CuPy and no nvcc"


def _nvml() -> Tuple[bool, str]:
    if importlib.util.find_spec("pynvml") is None:
        return False, "not installed (pip install nvidia-ml-py)"
    import pynvml
    pynvml.nvmlInit()
    try:
        driver = pynvml.nvmlSystemGetDriverVersion()
        driver = driver.decode() if isinstance(driver, bytes) else driver
        return True, f"driver {driver}, {pynvml.nvmlDeviceGetCount()} GPU(s)"
    finally:
        pynvml.nvmlShutdown()


SECTIONS: List[Tuple[str, List[Tuple[str, Probe]]]] = [
    ("Available frameworks", [("TensorFlow", _package("tensorflow", "tensorflow", "tensorflow-cpu", "tf-nightly")),
                              ("Keras", _package("keras", "keras"))]),
    ("Available MPI", [("MPI", _mpi), ("mpi4py", _package("mpi4py", "mpi4py"))]),
    ("Available GPU support", [("CuPy", _cupy), ("CUDA", _cuda), ("NVML", _nvml)]),
    ("Available planner solvers", [("OR-Tools", _package("ortools", "ortools")),
                                   ("NetworkX", _package("networkx", "networkx"))]),
]


def _run(probe: Probe) -> Tuple[bool, str]:
    try:
        return probe()
    except Exception as e:  # a broken install is a finding, not a crash
        return False, f"unusable: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}".rstrip(": ")


def device_lines(environ=None, cuda_source=None) -> List[str]:
    """The GPU each local rank of a ``blinkrun`` job on this machine will drive: the pin
    :mod:`..ranks.gpu_pin` gives local rank k of as many ranks as there are devices."""
    import os

    from ..ranks.gpu_pin import LOCAL_RANK_VARS, LOCAL_SIZE_VARS, gpu_pin, pin_summary
    environ = dict(os.environ if environ is None else environ)
    probe_env = {k: v for k, v in environ.items() if k not in LOCAL_RANK_VARS + LOCAL_SIZE_VARS}
    kwargs = {} if cuda_source is None else {"cuda_source": cuda_source}
    _, first = gpu_pin(dict(probe_env, OMPI_COMM_WORLD_LOCAL_RANK="0", OMPI_COMM_WORLD_LOCAL_SIZE="1"), **kwargs)
    if first is None:
        return ["    GPUs are not pinned (BLINKFLOW_PIN_GPUS=0): CUDA_VISIBLE_DEVICES stays as set"]
    if first.ordinal is None:
        return [f"    none: {first.reason}"]
    devices = None if first.device is None else (cuda_source or _cuda_devices)()
    size = len(devices) if devices else len(environ.get("CUDA_VISIBLE_DEVICES", "").split(","))
    lines, exported = [], set()
    for k in range(size):
        env = dict(probe_env, OMPI_COMM_WORLD_LOCAL_RANK=str(k), OMPI_COMM_WORLD_LOCAL_SIZE=str(size))
        _, pin = gpu_pin(env, lambda: devices)
        lines.append(f"    local rank {k}: {pin_summary(pin)}")
        exported.add(pin.visible)
    if len(exported) == 1 and None not in exported:
        lines.append(f"    every local rank gets CUDA_VISIBLE_DEVICES={exported.pop()}")
    lines.append(f"    (with {size} ranks per host; fewer take the first ones, more stop at init() unless "
                 "BLINKFLOW_TOPOLOGY is given)")
    return lines


def _cuda_devices():
    from blinkflow.topology.probe import cuda_devices
    return cuda_devices()


def report(sections=None, devices=device_lines) -> str:
    from blinkflow.version import __version__
    lines = [f"blinkflow v{__version__}:", ""]
    for title, probes in sections or SECTIONS:
        lines.append(f"{title}:")
        for name, probe in probes:
            ok, detail = _run(probe)
            lines.append(f"    [{'X' if ok else ' '}] {name}: {detail}")
        lines.append("")
    lines.append("Devices the local ranks will drive:")
    try:
        lines += devices()
    except Exception as e:  # a broken install is a finding, not a crash
        lines.append(f"    unknown: {type(e).__name__}: {e}")
    return "\n".join(lines).rstrip() + "\n"
