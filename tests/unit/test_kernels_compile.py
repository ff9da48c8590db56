"""Every ``kernels/*.cu`` compiles with nvcc, with the instantiations the RawModule uses.

Runs in the normal (CPU) suite so a broken kernel fails CI without a GPU; it is skipped only
when ``nvcc`` is absent. The compiled text is exactly what CuPy hands NVRTC at run time
(:func:`blinkflow.backends.cuda.kernels.module_source`, headers inlined) plus a table taking
the address of every name expression, which forces the same template instantiations that
``name_expressions`` asks NVRTC for.

Architectures: Volta (sm_70) is the oldest GPU Blink targets, but CUDA 13's nvcc dropped it
(``nvcc --list-gpu-arch`` starts at compute_75). We therefore compile for sm_70 when the local
nvcc still lists it (CUDA <= 12) and always for sm_75 (the oldest CUDA 13 supports), sm_80
(A100) and sm_90 (H100). Each arch goes through ptxas (``-fatbin`` with ``code=sm_XX``), so
inline PTX such as ``cvt.rn.f16.f32`` is validated too. Warnings are errors.
"""
import shutil
import subprocess

import pytest

from blinkflow.backends.cuda import kernels
from blinkflow.kernels import sources

NVCC = shutil.which("nvcc")
pytestmark = pytest.mark.skipif(NVCC is None, reason="nvcc not installed")

WANTED_ARCHS = ("70", "75", "80", "90")


def _archs():
    listed = subprocess.run([NVCC, "--list-gpu-arch"], capture_output=True, text=True).stdout.split()
    archs = [a for a in WANTED_ARCHS if f"compute_{a}" in listed]
    assert {"75", "80", "90"} <= set(archs), f"nvcc lists {listed}; expected sm_75, sm_80 and sm_90"
    return archs


def _instantiated_source(name: str) -> str:
    table = ",\n".join(f"    (void*)&{expr}" for expr in kernels.name_expressions(name))
    return f"{kernels.module_source(name)}\n// every name expression CuPy instantiates\nvoid* bf_instantiations[] = {{\n{table}\n}};\n"


def test_every_source_has_instantiations():
    names = sorted(p.name for p in sources())
    assert names == ["interpreter.cu", "pack.cu", "reduce.cu", "scale.cu"]
    assert len(kernels.name_expressions("interpreter.cu")) == 7 * 4  # every dtype x op
    assert len(kernels.name_expressions("reduce.cu")) == 7 * 4  # every dtype x op
    assert len(kernels.name_expressions("scale.cu")) == 7


@pytest.mark.parametrize("name", [p.name for p in sources()])
def test_kernel_compiles_with_nvcc(name, tmp_path):
    src = tmp_path / name
    src.write_text(_instantiated_source(name))
    gencode = []
    for arch in _archs():
        gencode += ["-gencode", f"arch=compute_{arch},code=sm_{arch}"]
    cmd = [NVCC, *kernels.OPTIONS, "-fatbin", *gencode, "-Werror", "all-warnings", "-o", str(tmp_path / "out.fatbin"), str(src)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"{' '.join(cmd)}\n{proc.stdout}\n{proc.stderr}"
    assert (tmp_path / "out.fatbin").stat().st_size > 0


def test_module_source_inlines_headers():
    text = kernels.module_source("reduce.cu")
    assert '#include "common.cuh"' not in text
    assert "struct bf_half" in text and "blinkflow_reduce" in text


@pytest.mark.parametrize("name", [p.name for p in sources()])
def test_kernel_compiles_under_nvrtc_with_name_expressions(name):
    """The exact path CuPy takes (NVRTC, name expressions, lowered names), where CuPy's NVRTC
    bindings load; needs no GPU. Skipped on machines without CuPy or libnvrtc."""
    try:
        from cupy_backends.cuda.libs import nvrtc

        nvrtc.getVersion()
    except Exception as e:  # ImportError, or libnvrtc missing
        pytest.skip(f"CuPy's NVRTC not loadable: {e}")
    exprs = kernels.name_expressions(name)
    for arch in ("75", "80", "90"):
        prog = nvrtc.createProgram(kernels.module_source(name), name, (), ())
        try:
            for e in exprs:
                nvrtc.addNameExpression(prog, e)
            try:
                nvrtc.compileProgram(prog, tuple(kernels.OPTIONS) + (f"--gpu-architecture=compute_{arch}",))
            except Exception as e:
                pytest.fail(f"NVRTC compute_{arch}: {e}\n{nvrtc.getProgramLog(prog)}")
            lowered = [nvrtc.getLoweredName(prog, e) for e in exprs]
            assert len(set(lowered)) == len(exprs) and all(s.startswith("_Z") for s in lowered)
        finally:
            nvrtc.destroyProgram(prog)
