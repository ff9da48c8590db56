"""``blinkrun`` pins each local rank to its GPU before CUDA starts in it, on a host of four GPUs
(the fake CuPy's ``FAKE_CUPY_DEVICES``), and says which in ``--verbose``."""
import re
import sys

import pytest

from blinkrun_helpers import run_blinkrun
from harness import fake_cupy_env

# What a rank sees: its rank, what CUDA_VISIBLE_DEVICES it got, and the physical GPU (PCI bus)
# of CUDA device <local rank>, the device local rank k drives.
RANK = """
import os, cupy
rank, local = int(os.environ["OMPI_COMM_WORLD_RANK"]), int(os.environ["OMPI_COMM_WORLD_LOCAL_RANK"])
print("SEES", rank, cupy.cuda.runtime.getDeviceCount(), cupy.cuda.runtime.deviceGetPCIBusId(local),
      os.environ.get("CUDA_VISIBLE_DEVICES"))
"""


def bus(gpu):   # the fake's PCI bus of physical GPU ``gpu`` (tests/fake_cupy/cupy/_devices.py)
    return f"0000:{0x18 + 0x10 * gpu:02X}:00.0"


def uuid(gpu):
    return f"GPU-66616b65-6770-752d-0000-{gpu:012x}"


@pytest.mark.parametrize("user_list, gpus", [(None, [0, 1, 2, 3]), ("3,1,2,0", [3, 1, 2, 0])])
def test_blinkrun_gives_local_rank_r_its_gpu(user_list, gpus):
    env = fake_cupy_env(FAKE_CUPY_DEVICES="4")
    if user_list is not None:
        env["CUDA_VISIBLE_DEVICES"] = user_list
    proc = run_blinkrun(["-np", "4", "--verbose", sys.executable, "-c", RANK], env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    seen = {int(r): (int(n), b, v) for r, n, b, v in re.findall(r"SEES (\d) (\d) (\S+) (\S+)", proc.stdout)}
    pinned = ",".join(uuid(g) for g in gpus)   # the same list, by uuid, for every local rank
    assert seen == {r: (4, bus(gpus[r]), pinned) for r in range(4)}, proc.stdout
    for r in range(4):
        assert re.search(rf"blinkrun: rank {r} \(local rank {r} on \S+\) drives CUDA device {r}: Fake GPU, "
                         rf"PCI {bus(gpus[r]).lower()}, {uuid(gpus[r])}", proc.stderr), proc.stderr


def test_pin_gpus_0_leaves_cuda_visible_devices_alone():
    env = fake_cupy_env(FAKE_CUPY_DEVICES="4", CUDA_VISIBLE_DEVICES="1,0", BLINKFLOW_PIN_GPUS="0")
    proc = run_blinkrun(["-np", "2", sys.executable, "-c", RANK], env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert sorted(re.findall(r"SEES (\d) 2 (\S+) (\S+)", proc.stdout)) == [("0", bus(1), "1,0"), ("1", bus(0), "1,0")]
