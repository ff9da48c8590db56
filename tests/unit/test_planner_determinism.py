"""Every rank plans on its own and ranks compare digests (DESIGN §1): the plan must not depend on
anything that differs between processes, such as the string hash seed behind set order."""
import os
import subprocess
import sys

SCRIPT = """
from blinkflow.planner import make_plan
from blinkflow.topology.presets import get_preset
cases = [("dgx1-v100", "allreduce", None, True), ("dgx1-v100", "broadcast", [1, 2, 4, 7], True),
         ("dgx2", "allgather", None, False), ("pcie-8gpu", "allreduce", [0, 3, 5], False),
         ("2xdgx1-v100", "allreduce", None, False), ("2xcpu-host:2", "broadcast", None, False),
         ("2xdgx1-v100", "allgather", [0, 1, 8, 9], False)]
for spec, collective, devices, hybrid in cases:
    print(spec, collective, devices, make_plan(get_preset(spec), collective, devices, hybrid=hybrid).digest())
"""


def _digests(seed: str) -> str:
    env = dict(os.environ, PYTHONHASHSEED=seed)
    proc = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_same_plan_digest_in_processes_with_different_hash_seeds():
    first = _digests("1")
    assert len(first.splitlines()) == 7
    assert _digests("2") == first
