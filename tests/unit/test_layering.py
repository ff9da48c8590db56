"""DESIGN §2: the planner, the schedule layer and topology never import MPI, CuPy or TensorFlow —
not on import, not while planning, and neither do the ``blinkrun topo`` / ``plan`` tools built on
them."""
import json
import subprocess
import sys

FORBIDDEN = ("mpi4py", "tensorflow", "keras", "cupy")

SCRIPT = """
import json, sys
import blinkflow.topology, blinkflow.topology.probe, blinkflow.topology.merge
import blinkflow.planner, blinkflow.schedule, blinkflow.schedule.lower, blinkflow.schedule.symbolic
from blinkflow.planner import make_plan, verify_plan, link_loads, ring_gbps
from blinkflow.topology import get_preset
for spec, collective in (("dgx1-v100", "allreduce"), ("2xcpu-host:2", "allreduce"), ("2xcpu-host:2", "broadcast")):
    topology = get_preset(spec)
    verify_plan(make_plan(topology, collective, hybrid=spec == "dgx1-v100"), topology)
import blinkflow.launcher.topo_cmd, blinkflow.launcher.plan_cmd
print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in %r)))
""" % (FORBIDDEN,)


def test_planner_and_topology_import_no_mpi_tf_or_cupy():
    proc = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == []


def test_the_check_sees_a_forbidden_import():
    # The probe above must be able to fail: importing mpi4py shows up in its answer.
    proc = subprocess.run([sys.executable, "-c", "import sys, mpi4py; print(sorted(m for m in sys.modules "
                           "if m.split('.')[0] == 'mpi4py'))"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and "mpi4py" in proc.stdout
