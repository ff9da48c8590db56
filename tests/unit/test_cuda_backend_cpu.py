"""What of the cuda backend must hold on a machine without CUDA (the CPU suite)."""
import os
import subprocess
import sys

import pytest

from blinkflow.backends.cuda import kernels
from blinkflow.backends.cuda.device import choose_device
from blinkflow.errors import BackendError
from blinkflow.ops import ReduceOp


def test_importing_the_cuda_backend_needs_no_cupy():
    code = ("import sys, blinkflow, blinkflow.backends.cuda as c\n"
            "import blinkflow.backends.cuda.backend, blinkflow.backends.cuda.dlpack, blinkflow.bench.gpu\n"
            "assert 'cupy' not in sys.modules and 'tensorflow' not in sys.modules, sorted(sys.modules)\n"
            "print(c.is_available())\n")
    # With the fake CuPy importable, an eager ``import cupy`` would succeed and show up in
    # sys.modules; without it (this machine) the check could never fail.
    fake = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fake_cupy")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([fake, os.environ.get("PYTHONPATH", "")]))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "True"  # and is_available() then does import it


def test_backend_without_cupy_raises_backend_error():
    try:
        import cupy  # noqa: F401
        pytest.skip("CuPy is installed")
    except ImportError:
        pass
    from blinkflow.backends.cuda import CudaBackend

    with pytest.raises(BackendError, match="CuPy"):
        CudaBackend(None)


def test_choose_device():
    # The local rank is the CUDA ordinal: topology ids (nvidia-smi indices) are not ordinals
    # under a permuted CUDA_VISIBLE_DEVICES or CUDA_DEVICE_ORDER=FASTEST_FIRST.
    assert choose_device(2, 8) == 2
    assert choose_device(3, 1) == 0  # one GPU: ranks share it
    assert choose_device(3, 2) == 1  # more ranks than GPUs (a given topology): round-robin
    with pytest.raises(BackendError):
        choose_device(0, 0)


def test_name_expressions_cover_every_dtype_and_op():
    exprs = kernels.name_expressions("reduce.cu")
    for dt in ("float16", "bfloat16", "float32", "float64", "int32", "int64", "uint8"):
        for op in (ReduceOp.SUM, ReduceOp.MIN, ReduceOp.MAX, ReduceOp.PRODUCT):
            assert kernels.reduce_name(dt, op) in exprs
    assert kernels.reduce_name("float32", ReduceOp.AVERAGE) == kernels.reduce_name("float32", ReduceOp.SUM)
    with pytest.raises(BackendError):
        kernels.reduce_name("complex64", ReduceOp.SUM)
    with pytest.raises(BackendError):
        kernels.pack_name("pack", 3)


def test_peer_routes_ask_cuda_and_stop_at_the_peer_limit():
    """Map a GPU's own memory and peers CUDA allows, stage the rest, and never a ninth peer
    (CUDA's limit per device), under the fake CuPy with 11 GPUs, 0 and 1 without peer access."""
    code = ("from cupy.cuda import runtime as rt\n"
            "from blinkflow.backends.cuda.peers import PeerRoutes\n"
            "routes = PeerRoutes(rt, 0)\n"
            "bus = [rt.deviceGetPCIBusId(i) for i in range(rt.getDeviceCount())]\n"
            "answers = []\n"
            "for b in bus:\n"
            "    answers.append(routes.can_map(b))\n"
            "    if answers[-1]:\n"
            "        routes.mapped(b)\n"
            "print(answers, routes.can_map(bus[2]), routes.can_map('0000:EE:00.0'))\n")
    fake = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fake_cupy")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([fake, os.environ.get("PYTHONPATH", "")]),
               FAKE_CUPY_DEVICES="11", FAKE_CUPY_NO_PEER="0-1")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env)
    assert out.returncode == 0, out.stderr
    # itself, not 1, then 2..9 (eight peers), then the limit; a mapped peer stays mappable; an
    # unknown GPU past the limit is staged too.
    assert out.stdout.split() == ["[True,", "False,"] + ["True,"] * 8 + ["False]", "True", "False"], out.stdout
