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
import blinkflow.launcher.commands.topo, blinkflow.launcher.commands.plan
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


# Production code imports no test tooling: the numpy emulator of the interpreter kernel ships only
# for the benches (``blinkflow/bench``) and the tests; the device executor reads raw host memory
# through ``blinkflow.backends.host_memory`` instead.
EMULATOR = "blinkflow.backends.device_emulator"


def _imported_modules(path) -> set:
    """The absolute names of the modules (and ``from`` targets) a file of the package imports."""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    package = list(path.relative_to(root).parts[:-1])  # the package a relative import starts from
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package[:len(package) - node.level + 1] if node.level else []
            module = ".".join(base + ([node.module] if node.module else []))
            names.add(module)
            names.update(f"{module}.{alias.name}" for alias in node.names)
    return names


def emulator_importers() -> list:
    """Files of ``blinkflow/`` that import the emulator, by path relative to the repository."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    return sorted(str(p.relative_to(root)) for p in (root / "blinkflow").rglob("*.py")
                  if p.name != "device_emulator.py" and EMULATOR in _imported_modules(p))


def test_only_the_benches_import_the_device_emulator():
    outside = [p for p in emulator_importers() if not p.startswith("blinkflow/bench/")]
    assert outside == [], f"production modules import the test emulator: {outside}"


def test_the_emulator_scan_sees_the_bench_that_uses_it():
    # The scan above must be able to fail: it finds the (relative, lazy) import in the loopback bench.
    assert "blinkflow/bench/gpu_loopback.py" in emulator_importers()
