"""CUDA sources of blinkflow's GPU kernels, shipped as package data.

This folder stays at the repository's top level; setup.cfg installs it as ``blinkflow.kernels``
so the sources travel with a non-editable ``pip install .``. The sources are compiled on first
use by CuPy (see ``blinkflow.backends.cuda``); nothing here imports CUDA.
"""
from pathlib import Path

SOURCE_DIR = Path(__file__).resolve().parent


def source_path(name: str) -> Path:
    """Absolute path of the kernel source ``name`` (e.g. ``"reduce.cu"``)."""
    path = SOURCE_DIR / name
    if not path.is_file():
        raise FileNotFoundError(f"no CUDA source {name!r} in {SOURCE_DIR}")
    return path


def sources() -> list:
    """Every ``*.cu`` file shipped with blinkflow, sorted by name."""
    return sorted(SOURCE_DIR.glob("*.cu"))
