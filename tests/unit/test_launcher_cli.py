"""blinkrun's command line without launching: bad usage exits 2 with click's message;
--version and --check-build."""
import subprocess

import pytest
from click.testing import CliRunner

from blinkflow.launcher.commands import check_build
from blinkflow.launcher.commands.run import command
from blinkflow.version import __version__
from blinkrun_helpers import blinkrun_argv


@pytest.mark.parametrize("args, message", [
    (["-np", "0", "python", "x.py"], "0 is not in the range x>=1"),
    (["-np", "2"], "missing COMMAND"),
    (["python", "x.py"], "missing option -np"),
    (["-np", "2", "-H", "a:4,b", "-H", "a:x", "python"], "slots must be a positive integer"),
    (["-np", "2", "-H", "a:2", "--hostfile", "h", "python"], "either with -H or with --hostfile"),
    (["-np", "2", "--cycle-time-ms", "0", "python"], "BLINKFLOW_CYCLE_TIME must be > 0"),
    (["-np", "2", "--backend", "tpu", "python"], "'tpu' is not one of"),
    (["-np", "2", "--mpi-args", "'unbalanced", "python"], "--mpi-args"),
    (["-np", "2", "--fusion-threshold-mb", "nan", "true"], "'--fusion-threshold-mb': 'nan' is not a number of MiB"),
    (["-np", "2", "--fusion-threshold-mb", "inf", "true"], "'--fusion-threshold-mb': 'inf' is not a number of MiB"),
    (["-np", "2", "--cycle-time-ms", "nan", "true"], "'--cycle-time-ms': 'nan' is not a finite number"),
    (["-np", "2", "--stall-check-shutdown-time-seconds", "inf", "true"],
     "'--stall-check-shutdown-time-seconds': 'inf' is not a finite number"),
    (["-np", "2", "--topology", "dgx9", "true"], "--topology: unknown preset 'dgx9'"),
    (["-np", "2", "--topology", "./missing.json", "true"], "no file './missing.json'"),
])
def test_bad_usage_exits_2(args, message):
    result = CliRunner().invoke(command, args)
    assert result.exit_code == 2, result.output
    assert message in result.output and "Traceback" not in result.output


def test_bad_topology_variable_is_named_before_launch(monkeypatch):
    monkeypatch.setenv("BLINKFLOW_TOPOLOGY", "cpu-host:x")
    result = CliRunner().invoke(command, ["-np", "2", "true"])
    assert result.exit_code == 2 and "BLINKFLOW_TOPOLOGY: cpu-host:x needs a number of ranks" in result.output


def test_bad_hostfile_line_is_named(tmp_path):
    hostfile = tmp_path / "hosts"
    hostfile.write_text("# two hosts\nnode1 slots=2\nnode2 slot=2\n")
    result = CliRunner().invoke(command, ["-np", "2", "--hostfile", str(hostfile), "python"])
    assert result.exit_code == 2 and f"{hostfile}:3: expected 'host slots=N'" in result.output


def test_real_script_bad_usage_and_version():
    proc = subprocess.run(blinkrun_argv() + ["-np", "0", "true"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr == "blinkrun: error: Invalid value for '-np' / '--num-proc': 0 is not in the range x>=1.\n"
    proc = subprocess.run(blinkrun_argv() + ["--version"], capture_output=True, text=True, timeout=60)
    assert (proc.returncode, proc.stdout) == (0, f"blinkflow {__version__}\n")


def test_check_build_real():
    proc = subprocess.run(blinkrun_argv() + ["--check-build"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert out.startswith(f"blinkflow v{__version__}:\n")
    for title in ("Available frameworks:", "Available MPI:", "Available GPU support:", "Available planner solvers:"):
        assert title in out
    assert "[X] MPI: Open MPI" in out or "[X] MPI: MPICH" in out
    for name in ("TensorFlow", "Keras", "mpi4py", "CuPy", "CUDA", "NVML", "OR-Tools"):
        assert f"] {name}: " in out


def test_check_build_never_crashes_on_a_broken_probe():
    def broken():
        raise ImportError("libcudart.so.12: cannot open shared object file")
    out = check_build.report([("Available GPU support", [("CuPy", broken), ("OK", lambda: (True, "1.0"))])])
    assert "    [ ] CuPy: unusable: ImportError: libcudart.so.12: cannot open shared object file\n" in out
    assert "    [X] OK: 1.0\n" in out
