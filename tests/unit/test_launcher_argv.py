"""The mpirun argv builder, for Open MPI and MPICH/Hydra, without running MPI."""
import pytest

from blinkflow.launcher.job.hosts import Host
from blinkflow.launcher.job.mpi_impl import MpiImpl, MPICH, OPEN_MPI
from blinkflow.launcher.job.mpirun_argv import LaunchSpec, build_mpirun_argv, format_argv, rank_command

OMPI = MpiImpl(OPEN_MPI, "Open MPI", "5.0.11", "/venv/bin/mpirun", "pip wheel")
HYDRA = MpiImpl(MPICH, "MPICH", "4.2.0", "/usr/bin/mpiexec.hydra")
ENV = {"PATH": "/venv/bin:/usr/bin", "LD_LIBRARY_PATH": "/opt/lib", "HOME": "/root"}
CMD = ("python", "train.py", "--epochs", "2")
WRAPPED = ["/venv/bin/python", "-m", "blinkflow.launcher.ranks.rank_exec", "--", *CMD]


def build(impl, spec, is_root=False, cores=8, **kw):
    return build_mpirun_argv(impl, spec, python="/venv/bin/python", environ=ENV, is_root=is_root,
                             local_cores=cores, **kw)


def pairs(argv, flag):
    return [argv[i + 1] for i, a in enumerate(argv) if a == flag]


def test_openmpi_local_exact():
    spec = LaunchSpec(np=4, command=CMD, settings={"BLINKFLOW_CYCLE_TIME": "2.0"})
    assert build(OMPI, spec) == [
        "/venv/bin/mpirun", "-np", "4", "--bind-to", "none", "--map-by", "slot",
        "-x", "BLINKFLOW_CYCLE_TIME=2.0", "-x", "HOME", "-x", "LD_LIBRARY_PATH", "-x", "PATH",
        "--mca", "osc", "^ucx", "--mca", "btl", "^ofi", *WRAPPED]


def test_openmpi_defaults_yield_to_the_users_setting():
    spec = LaunchSpec(np=2, command=CMD)
    argv = build_mpirun_argv(OMPI, spec, python="/venv/bin/python",
                             environ=dict(ENV, OMPI_MCA_osc="ucx", OMPI_MCA_btl="self,tcp"), is_root=False, local_cores=8)
    assert "--mca" not in argv
    assert "--mca" not in build(HYDRA, spec)


@pytest.mark.parametrize("given", [dict(mpi_args=("--mca", "btl", "self,tcp")), dict(tcp_only=True)])
def test_openmpi_defaults_are_never_a_second_value_for_a_parameter(given):
    """mpirun refuses a parameter given twice: a default the user set in --mpi-args or by --tcp is left out."""
    argv = build(OMPI, LaunchSpec(np=2, command=CMD, **given))
    assert pairs(argv, "--mca").count("btl") == 1 and "^ofi" not in argv
    assert pairs(argv, "--mca").count("osc") == 1


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
    assert pairs(argv, "-x") == ["BLINKFLOW_BACKEND=cpu", "BLINKFLOW_TOPOLOGY=dgx1-v100", "HOME", "LD_LIBRARY_PATH",
                                 "PATH"]
    tail = argv[argv.index("btl_tcp_if_include") - 1:]  # the user's --mpi-args come after blinkflow's defaults
    assert tail == ["--mca", "btl_tcp_if_include", "eth0", "/venv/bin/python", "-m", "blinkflow.launcher.ranks.rank_exec",
                    "--output-dir", "/logs", "--", *CMD]
    spec = LaunchSpec(np=8, command=CMD, hosts=(Host("a", 4), Host("b", 4)), hostfile="hosts.txt")
    argv = build(OMPI, spec)
    assert pairs(argv, "--hostfile") == ["hosts.txt"] and "--host" not in argv


def test_hydra_argv():
    spec = LaunchSpec(np=8, command=CMD, hosts=(Host("a", 4), Host("b", 4)),
                      settings={"BLINKFLOW_LOG_LEVEL": "debug"})
    argv = build(HYDRA, spec, is_root=True, cores=1)
    assert argv == ["/usr/bin/mpiexec.hydra", "-np", "8", "-hosts", "a:4,b:4",
                    "-genv", "BLINKFLOW_LOG_LEVEL", "debug", "-genvnone", "-genvlist", "HOME,LD_LIBRARY_PATH,PATH",
                    *WRAPPED]
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


def test_every_variable_but_the_left_out_ones_reaches_every_host():
    environ = dict(ENV, MY_DATA_DIR="/data", OMPI_MCA_btl="^openib", PRTE_MCA_plm_ssh_agent="ssh -F c",
                   CUDA_VISIBLE_DEVICES="0,1", OLDPWD="/x", HOSTNAME="vm", SSH_CONNECTION="1 2 3 4",
                   OMPI_COMM_WORLD_RANK="3", PMIX_RANK="3", BASH_FUNC_f="() { :; }", HOROVOD_SECRET_KEY="k",
                   BLINKFLOW_TIMELINE="/t.json", **{"A.B": "not a name"})
    spec = LaunchSpec(np=2, command=CMD, settings={"BLINKFLOW_TIMELINE": "/t.json"})
    argv = build_mpirun_argv(OMPI, spec, python="/venv/bin/python", environ=environ, is_root=False, local_cores=8)
    assert pairs(argv, "-x") == ["BLINKFLOW_TIMELINE=/t.json", "HOME", "LD_LIBRARY_PATH", "MY_DATA_DIR",
                                 "OMPI_MCA_btl", "PATH", "PRTE_MCA_plm_ssh_agent"]


def test_network_interfaces_ssh_tcp_binding_and_timestamps():
    spec = LaunchSpec(np=2, command=CMD, nics=("eth1", "ib0"), ssh_port=2222, ssh_identity_file="/k/id rsa",
                      tcp_only=True, binding_args=("--bind-to", "core"), timestamp_output=True)
    argv = build(OMPI, spec)
    assert argv[3:5] == ["--bind-to", "core"] and "none" not in argv
    assert pairs(argv, "--prtemca") == ["oob_tcp_if_include", "plm_ssh_args"]
    assert argv[argv.index("oob_tcp_if_include") + 1] == "eth1,ib0"
    assert argv[argv.index("plm_ssh_args") + 1] == "-p 2222 -i '/k/id rsa'"
    mca = list(zip(pairs(argv, "--mca"), [argv[i + 2] for i, a in enumerate(argv) if a == "--mca"]))
    assert ("btl_tcp_if_include", "eth1,ib0") in mca and ("pml", "ob1") in mca and ("btl", "self,sm,tcp") in mca
    assert argv[-len(CMD) - 2:-len(CMD) - 1] == ["--timestamp"]
    hydra = build(HYDRA, LaunchSpec(np=2, command=CMD, nics=("eth1",), ssh_port=2222))
    assert pairs(hydra, "-iface") == ["eth1"] and pairs(hydra, "-bootstrap-exec-args") == ["-p 2222"]
    with pytest.raises(ValueError, match="--tcp sets Open MPI's options"):
        build(HYDRA, spec)
    with pytest.raises(ValueError, match="one network interface"):
        build(HYDRA, LaunchSpec(np=2, command=CMD, nics=("eth1", "ib0")))
    with pytest.raises(ValueError, match="--binding-args sets Open MPI's options"):
        build(HYDRA, LaunchSpec(np=2, command=CMD, binding_args=("--bind-to", "core")))
