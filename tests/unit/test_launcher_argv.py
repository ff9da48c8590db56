"""The mpirun argv builder, for Open MPI and MPICH/Hydra, without running MPI."""
import pytest

from blinkflow.launcher.hosts import Host
from blinkflow.launcher.mpi_impl import MpiImpl, MPICH, OPEN_MPI
from blinkflow.launcher.mpirun_argv import LaunchSpec, build_mpirun_argv, format_argv, rank_command

OMPI = MpiImpl(OPEN_MPI, "Open MPI", "5.0.11", "/venv/bin/mpirun", "pip wheel")
HYDRA = MpiImpl(MPICH, "MPICH", "4.2.0", "/usr/bin/mpiexec.hydra")
ENV = {"PATH": "/venv/bin:/usr/bin", "LD_LIBRARY_PATH": "/opt/lib", "HOME": "/root"}
CMD = ("python", "train.py", "--epochs", "2")
WRAPPED = ["/venv/bin/python", "-m", "blinkflow.launcher.rank_exec", "--", *CMD]


def build(impl, spec, is_root=False, cores=8, **kw):
    return build_mpirun_argv(impl, spec, python="/venv/bin/python", environ=ENV, is_root=is_root,
                             local_cores=cores, **kw)


def pairs(argv, flag):
    return [argv[i + 1] for i, a in enumerate(argv) if a == flag]


def test_openmpi_local_exact():
    spec = LaunchSpec(np=4, command=CMD, settings={"BLINKFLOW_CYCLE_TIME": "2.0"})
    assert build(OMPI, spec) == [
        "/venv/bin/mpirun", "-np", "4", "--bind-to", "none", "--map-by", "slot",
        "-x", "BLINKFLOW_CYCLE_TIME=2.0", "-x", "PATH", "-x", "LD_LIBRARY_PATH", *WRAPPED]


@pytest.mark.parametrize("is_root", [False, True])
def test_openmpi_root_flag(is_root):
    argv = build(OMPI, LaunchSpec(np=1, command=CMD), is_root=is_root)
    assert ("--allow-run-as-root" in argv) is is_root


@pytest.mark.parametrize("np_, cores, hosts, over", [
    (2, 2, (), False), (3, 2, (), True), (8, 2, (Host("a", 4), Host("b", 4)), False),
    (9, 64, (Host("a", 4), Host("b", 4)), True),
])
def test_openmpi_oversubscribe_when_ranks_exceed_slots_or_cores(np_, cores, hosts, over):
    argv = build(OMPI, LaunchSpec(np=np_, command=CMD, hosts=hosts), cores=cores)
    assert ("--oversubscribe" in argv) is over


def test_openmpi_hosts_hostfile_settings_and_mpi_args():
    spec = LaunchSpec(np=8, command=CMD, hosts=(Host("a", 4), Host("b", 4)),
                      settings={"BLINKFLOW_TOPOLOGY": "dgx1-v100", "BLINKFLOW_BACKEND": "cpu"},
                      mpi_args=("--mca", "btl_tcp_if_include", "eth0"), output_dir="/logs")
    argv = build(OMPI, spec)
    assert pairs(argv, "--host") == ["a:4,b:4"] and "--hostfile" not in argv
    assert pairs(argv, "-x") == ["BLINKFLOW_BACKEND=cpu", "BLINKFLOW_TOPOLOGY=dgx1-v100", "PATH", "LD_LIBRARY_PATH"]
    tail = argv[argv.index("--mca"):]
    assert tail == ["--mca", "btl_tcp_if_include", "eth0", "/venv/bin/python", "-m", "blinkflow.launcher.rank_exec",
                    "--output-dir", "/logs", "--", *CMD]
    spec = LaunchSpec(np=8, command=CMD, hosts=(Host("a", 4), Host("b", 4)), hostfile="hosts.txt")
    argv = build(OMPI, spec)
    assert pairs(argv, "--hostfile") == ["hosts.txt"] and "--host" not in argv


def test_hydra_argv():
    spec = LaunchSpec(np=8, command=CMD, hosts=(Host("a", 4), Host("b", 4)),
                      settings={"BLINKFLOW_LOG_LEVEL": "debug"})
    argv = build(HYDRA, spec, is_root=True, cores=1)
    assert argv == ["/usr/bin/mpiexec.hydra", "-np", "8", "-hosts", "a:4,b:4",
                    "-genv", "BLINKFLOW_LOG_LEVEL", "debug", "-genv", "PATH", ENV["PATH"],
                    "-genv", "LD_LIBRARY_PATH", "/opt/lib", *WRAPPED]
    assert not {"--allow-run-as-root", "--oversubscribe", "-x", "--bind-to"} & set(argv)


def test_hydra_hostfile_uses_converted_copy():
    spec = LaunchSpec(np=2, command=CMD, hosts=(Host("a", 2),), hostfile="hosts.txt")
    assert pairs(build(HYDRA, spec, mpich_hostfile="/tmp/x/hosts.hydra"), "-f") == ["/tmp/x/hosts.hydra"]
    with pytest.raises(ValueError):
        build(HYDRA, spec)


def test_command_is_passed_verbatim_after_double_dash():
    spec = LaunchSpec(np=1, command=("sh", "-c", "echo 'a b'; exit 3", "--np", "5"))
    assert rank_command("py", spec)[-6:] == ["--", "sh", "-c", "echo 'a b'; exit 3", "--np", "5"]
    assert format_argv(["a", "echo 'a b'"]) == "a 'echo '\"'\"'a b'\"'\"''"
