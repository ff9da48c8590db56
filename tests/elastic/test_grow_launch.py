"""What an elastic job changes in blinkrun's launch: ULFM, where it starts, a new rank's argv."""
import json
import os
import stat

import pytest

from blinkflow.config import Config
from blinkflow.errors import ConfigError
from blinkflow.launcher.elastic.spec import ElasticSpec
from blinkflow.launcher.elastic.launch import (DETECTOR_SETTINGS, HOST_LOSS_ARGS, HOSTS_FILE_NAME, forwarded_names,
                                              mpirun_args, slot_argv, start_driver, starting_hosts)
from blinkflow.launcher.job.hosts import Host
from blinkflow.launcher.job.mpi_impl import MPICH, OPEN_MPI, MpiImpl
from blinkflow.launcher.job.mpirun_argv import LaunchSpec

OMPI = MpiImpl(OPEN_MPI, "Open MPI", "5.0.11", "/venv/bin/mpirun", "pip wheel")
HYDRA = MpiImpl(MPICH, "MPICH", "4.2.0", "/usr/bin/mpiexec.hydra")


def test_an_elastic_job_runs_under_ulfm_and_may_place_ranks_beyond_open_mpis_slots():
    assert mpirun_args(OMPI) == ("--with-ft", "ulfm", "--oversubscribe")
    assert mpirun_args(OMPI, [Host("a", 2), Host("a", 1)]) == ("--with-ft", "ulfm", "--oversubscribe")


def test_an_elastic_job_on_several_hosts_also_outlives_a_silent_host():
    detector = ("--mca", "mpi_ft_detector_period", "3", "--mca", "mpi_ft_detector_timeout", "15")
    assert mpirun_args(OMPI, [Host("a", 2), Host("b", 2)], environ={}) == (
        ("--with-ft", "ulfm", "--oversubscribe") + HOST_LOSS_ARGS + detector)
    assert ("--mca", "mpi_ft_detector_thread", "false") == HOST_LOSS_ARGS[3:6]   # its thread races MPI_Init


def test_the_detectors_timing_set_in_the_environment_is_left_to_open_mpi():
    """blinkrun sets the period and timeout unless the environment names them (OMPI_MCA_*,
    which mpirun reads and forwards)."""
    args = mpirun_args(OMPI, [Host("a", 2), Host("b", 2)], environ={"OMPI_MCA_mpi_ft_detector_timeout": "60"})
    assert "mpi_ft_detector_timeout" not in args and args[-2:] == ("mpi_ft_detector_period", "3"), args
    assert float(DETECTOR_SETTINGS[1][1]) > 3 * float(DETECTOR_SETTINGS[0][1])   # Open MPI's rule


def test_an_mpi_without_ulfm_is_refused():
    with pytest.raises(ConfigError, match="need Open MPI 5 with ULFM"):
        mpirun_args(HYDRA)


def test_a_new_rank_is_the_wrapper_with_its_slot_and_no_variables_value():
    """A command line is readable by every user of the host: the new rank's variables travel
    from the job's rank 0 over MPI, and the hosts file names them only."""
    launch = LaunchSpec(np=2, command=("python", "train.py"), output_dir="/logs")
    argv = slot_argv("/venv/bin/python", launch, 5)
    assert argv == ["/venv/bin/python", "-m", "blinkflow.launcher.ranks.rank_exec", "--rank", "5", "--output-dir", "/logs",
                    "--", "python", "train.py"]
    assert Config.from_env({"BLINKFLOW_ELASTIC_JOINING": "1"}).elastic_joining == 1
    environ = {"PATH": "/venv/bin:/usr/bin", "CLOUD_TOKEN": "s3cr3t-value", "SSH_AUTH_SOCK": "/tmp/agent",
               "BLINKFLOW_CYCLE_TIME": "5"}
    assert forwarded_names(environ, {"BLINKFLOW_ELASTIC_MIN_NP": "1"}) == [
        "BLINKFLOW_CYCLE_TIME", "BLINKFLOW_ELASTIC_MIN_NP", "CLOUD_TOKEN", "PATH"]


def test_the_hosts_file_names_the_forwarded_variables_without_their_values(tmp_path):
    spec = ElasticSpec(min_np=1)
    launch = LaunchSpec(np=2, command=("python", "train.py"))
    environ = {"PATH": "/usr/bin", "CLOUD_TOKEN": "s3cr3t-value"}
    driver, launch = start_driver(spec, launch, str(tmp_path), environ, say=lambda line: None)
    try:
        driver.requests.append({"id": 1, "host": "localhost", "info_key": "host",
                                "procs": [{"slot": 2, "argv": driver.slot_argv(2)}]})
        driver.write()
    finally:
        driver.stop()
    text = (tmp_path / HOSTS_FILE_NAME).read_text()
    assert "s3cr3t-value" not in text
    body = json.loads(text)
    assert "CLOUD_TOKEN" in body["forward"] and "BLINKFLOW_ELASTIC_HOSTS_FILE" in body["forward"]
    assert not any("=" in arg for request in body["requests"] for proc in request["procs"] for arg in proc["argv"])


def test_a_new_rank_takes_the_variables_it_lacks_and_reads_its_settings_again(monkeypatch):
    from blinkflow import config
    from blinkflow.elastic import grow

    monkeypatch.setenv("PATH", "/this/hosts/bin")
    monkeypatch.delenv("CLOUD_TOKEN", raising=False)
    monkeypatch.delenv("BLINKFLOW_CYCLE_TIME", raising=False)
    monkeypatch.setattr(config, "_CONFIG", config.Config())
    grow._adopt_environment({"PATH": "/blinkruns/bin", "CLOUD_TOKEN": "s3cr3t-value", "BLINKFLOW_CYCLE_TIME": "5"})
    assert os.environ["PATH"] == "/this/hosts/bin" and os.environ["CLOUD_TOKEN"] == "s3cr3t-value"
    assert config.get_config().cycle_time == 5.0
    monkeypatch.setattr(config, "_CONFIG", None)


def test_the_job_starts_on_what_discovery_finds(tmp_path):
    script = tmp_path / "discover.sh"
    script.write_text("#!/bin/sh\necho a:2\necho b:1\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    spec = ElasticSpec(min_np=1, host_discovery_script=str(script))
    assert starting_hosts(spec, None) == [Host("a", 2), Host("b", 1)]
    with pytest.raises(ConfigError, match="not both"):
        starting_hosts(spec, [Host("a", 2)])


def test_without_a_script_the_hosts_given_stay(tmp_path):
    assert starting_hosts(ElasticSpec(min_np=1), [Host("a", 2)]) == [Host("a", 2)]
    assert starting_hosts(ElasticSpec(min_np=1), None) is None


def test_a_script_that_finds_nothing_cannot_start_a_job(tmp_path):
    script = tmp_path / "discover.sh"
    script.write_text("#!/bin/sh\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    with pytest.raises(ConfigError, match="found no hosts to start on"):
        starting_hosts(ElasticSpec(min_np=1, host_discovery_script=str(script)), None)
