"""The planner, the schedule layer and topology never import MPI, CuPy or TensorFlow — not on
import, not while planning, and neither do the ``blinkrun topo`` / ``plan`` tools built on them
(so planning works, and is tested, on a machine with none of them)."""
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
%s
for spec, collective in (("dgx1-v100", "allreduce"), ("2xcpu-host:2", "allreduce"), ("2xcpu-host:2", "broadcast")):
    topology = get_preset(spec)
    verify_plan(make_plan(topology, collective, hybrid=spec == "dgx1-v100"), topology)
import blinkflow.launcher.topo_cmd, blinkflow.launcher.plan_cmd
print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in %r)))
"""


def forbidden_imports(planted: str = "") -> list:
    """The forbidden modules loaded after importing and running the layers; ``planted``: a line
    run among them (what a layer importing one of them would do)."""
    proc = subprocess.run([sys.executable, "-c", SCRIPT % (planted, FORBIDDEN)], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_planner_and_topology_import_no_mpi_tf_or_cupy():
    assert forbidden_imports() == []


def test_the_probe_sees_a_forbidden_import_among_the_layers():
    # The very probe above must be able to fail: a layer that imports mpi4py shows in its answer.
    assert "mpi4py" in forbidden_imports("import mpi4py.MPI")
