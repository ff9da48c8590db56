"""The GPU extra that fits the machine: the CUDA toolkit's major, else the driver's."""
import pytest

from blinkflow.launcher.commands.cuda_extra import cuda_major, extra_for

NVCC = "nvcc: NVIDIA (R) Cuda compiler driver\nCuda compilation tools, release 13.0, V13.0.48\n"
SMI = "| NVIDIA-SMI 570.86.15    Driver Version: 570.86.15    CUDA Version: 12.8     |\n"


def runner(outputs):
    return lambda argv: outputs.get(argv[0])


@pytest.mark.parametrize("outputs, major, source", [
    ({"nvcc": NVCC, "nvidia-smi": SMI}, 13, "nvcc --version"),   # the toolkit's libraries are what CuPy loads
    ({"nvidia-smi": SMI}, 12, "nvidia-smi"),
    ({}, None, "no nvcc and no nvidia-smi found"),
    ({"nvcc": "garbage", "nvidia-smi": "garbage"}, None, "no nvcc and no nvidia-smi found"),
])
def test_cuda_major(outputs, major, source):
    assert cuda_major(runner(outputs)) == (major, source)


def test_extra_for_each_supported_major():
    assert [extra_for(m) for m in (11, 12, 13, None)] == [None, "gpu-cuda12", "gpu-cuda13", None]
    import configparser, pathlib
    cfg = configparser.ConfigParser()
    cfg.read(pathlib.Path(__file__).parents[2] / "setup.cfg")
    extras = cfg["options.extras_require"]
    assert "cupy-cuda12x" in extras["gpu-cuda12"] and "cupy-cuda13x" in extras["gpu-cuda13"]
