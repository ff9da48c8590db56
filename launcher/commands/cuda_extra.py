"""Which GPU extra of blinkflow fits this machine: ``gpu-cuda<major>``, the CuPy built for the
CUDA major version installed here.

pip's extras cannot look at the machine, so the README's install line asks this file (it needs
only the standard library, so it runs from a checkout before blinkflow is installed)::

    pip install ".[tf,$(python3 launcher/commands/cuda_extra.py)]"

The CUDA toolkit's major (``nvcc --version``) decides where there is one: CuPy compiles its
kernels with the toolkit's NVRTC and loads its libraries, and a CuPy built for another major
does not find them. Without a toolkit, the driver's (``nvidia-smi``'s "CUDA Version") decides:
CuPy's wheels then bring their own runtime, which the driver must support.
"""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
from typing import Callable, Optional, Tuple

#: CUDA majors blinkflow has an extra for (setup.cfg: gpu-cuda12, gpu-cuda13).
SUPPORTED = (12, 13)

Runner = Callable[[list], Optional[str]]


def _output(argv: list) -> Optional[str]:
    if shutil.which(argv[0]) is None:
        return None
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return None


def cuda_major(run: Runner = _output) -> Tuple[Optional[int], str]:
    """(major, where it was read) — the toolkit's if nvcc is there, else the driver's; (None, why) without."""
    out = run(["nvcc", "--version"])
    match = re.search(r"release (\d+)\.", out or "")
    if match:
        return int(match.group(1)), "nvcc --version"
    out = run(["nvidia-smi"])
    match = re.search(r"CUDA Version:\s*(\d+)\.", out or "")
    if match:
        return int(match.group(1)), "nvidia-smi"
    return None, "no nvcc and no nvidia-smi found"


def extra_for(major: Optional[int]) -> Optional[str]:
    return f"gpu-cuda{major}" if major in SUPPORTED else None


def main() -> int:
    major, source = cuda_major()
    extra = extra_for(major)
    if extra is None:
        what = f"CUDA {major} ({source})" if major is not None else source
        print(f"cuda_extra: {what}: blinkflow's GPU extras are for CUDA "
              f"{' and '.join(map(str, SUPPORTED))}; install without a GPU extra to run on the CPUs", file=sys.stderr)
        return 1
    print(extra)
    return 0


if __name__ == "__main__":
    sys.exit(main())
