"""Every horovodrun flag of Horovod 0.28 is taken by blinkrun with Horovod's meaning, or refused on
one line that says what to use instead (launcher/flags/table.py)."""
import pytest
from click.testing import CliRunner

from blinkflow.launcher.flags.table import ACCEPTED, ELASTIC, HOROVOD_FLAGS, NATIVE, REFUSED, by_name
from blinkflow.launcher.commands.run import command, spec_from_options

# The flags of horovod/runner/launch.py (v0.28.1, parse_args), every spelling, with the number of
# values each takes: the list the table must cover, copied here as data so a row dropped from the
# table fails this test.
HOROVODRUN_0_28 = {
    ("-v", "--version"): 0, ("-np", "--num-proc"): 1, ("-cb", "--check-build"): 0, ("--disable-cache",): 0,
    ("--start-timeout",): 1, ("--network-interfaces",): 1, ("--network-interface",): 1,
    ("--output-filename",): 1, ("--verbose",): 0, ("--config-file",): 1,
    ("-p", "--ssh-port"): 1, ("-i", "--ssh-identity-file"): 1,
    ("--fusion-threshold-mb",): 1, ("--cycle-time-ms",): 1, ("--cache-capacity",): 1,
    ("--hierarchical-allreduce",): 0, ("--no-hierarchical-allreduce",): 0,
    ("--hierarchical-allgather",): 0, ("--no-hierarchical-allgather",): 0,
    ("--torus-allreduce",): 0, ("--no-torus-allreduce",): 0,
    ("--autotune",): 0, ("--no-autotune",): 0, ("--autotune-log-file",): 1, ("--autotune-warmup-samples",): 1,
    ("--autotune-steps-per-sample",): 1, ("--autotune-bayes-opt-max-samples",): 1,
    ("--autotune-gaussian-process-noise",): 1,
    ("--min-np", "--min-num-proc"): 1, ("--max-np", "--max-num-proc"): 1, ("--slots-per-host",): 1,
    ("--elastic-timeout",): 1, ("--reset-limit",): 1, ("--blacklist-cooldown-range",): 2,
    ("--timeline-filename",): 1, ("--timeline-mark-cycles",): 0, ("--no-timeline-mark-cycles",): 0,
    ("--no-stall-check",): 0, ("--stall-check",): 0, ("--stall-check-warning-time-seconds",): 1,
    ("--stall-check-shutdown-time-seconds",): 1,
    ("--mpi-threads-disable",): 0, ("--no-mpi-threads-disable",): 0, ("--mpi-args",): 1, ("--tcp",): 0,
    ("--binding-args",): 1, ("--num-nccl-streams",): 1, ("--thread-affinity",): 1, ("--gloo-timeout-seconds",): 1,
    ("--log-level",): 1, ("--log-with-timestamp",): 0, ("--log-without-timestamp",): 0,
    ("-prefix-timestamp", "--prefix-output-with-timestamp"): 0, ("--log-hide-timestamp",): 0,
    ("--no-log-hide-timestamp",): 0,
    ("-H", "--hosts"): 1, ("-hostfile", "--hostfile"): 1, ("--host-discovery-script",): 1,
    ("--gloo",): 0, ("--mpi",): 0, ("--jsrun",): 0,
    ("-h", "--help"): 0,   # argparse's own
}
SPELLINGS = sorted((name, nargs) for names, nargs in HOROVODRUN_0_28.items() for name in names)
EXITS_AT_ONCE = {"-h", "--help", "-v", "--version", "-cb", "--check-build"}
ENV = {"PATH": "/usr/bin", "HOME": "/root"}


def values_for(name, tmp_path):
    """Values a user would give the flag."""
    if name in ("-hostfile", "--hostfile"):
        path = tmp_path / "hosts"
        path.write_text("a slots=1\nb slots=1\n")
        return [str(path)]
    if name == "--config-file":
        path = tmp_path / "horovod.yaml"
        path.write_text("params:\n  fusion_threshold_mb: 32\n")
        return [str(path)]
    return {"-np": ["2"], "--num-proc": ["2"], "-H": ["a:1,b:1"], "--hosts": ["a:1,b:1"],
            "--log-level": ["DEBUG"], "--mpi-args": ["--mca btl ^openib"], "--binding-args": ["--bind-to core"],
            "--network-interfaces": ["eth0,eth1"], "--network-interface": ["eth0"],
            "--timeline-filename": [str(tmp_path / "t.json")], "--output-filename": [str(tmp_path / "out")],
            "-i": [str(tmp_path / "key")], "--ssh-identity-file": [str(tmp_path / "key")],
            "--blacklist-cooldown-range": ["10", "100"]}.get(name, ["7"] * HOROVODRUN_0_28_NARGS[name])


HOROVODRUN_0_28_NARGS = dict(SPELLINGS)


def test_the_table_holds_every_horovodrun_flag_once_with_its_arity():
    table = {row.names: row.nargs for row in HOROVOD_FLAGS}
    assert table == HOROVODRUN_0_28
    assert all(row.handling in (NATIVE, ACCEPTED, REFUSED) and row.note for row in HOROVOD_FLAGS)
    assert all(row.owner in ("", ELASTIC) for row in HOROVOD_FLAGS)
    elastic = {row.name for row in HOROVOD_FLAGS if row.owner == ELASTIC}
    assert elastic == {"--min-num-proc", "--max-num-proc", "--slots-per-host", "--host-discovery-script",
                       "--elastic-timeout", "--reset-limit", "--blacklist-cooldown-range"}


def test_native_flags_are_declared_by_blinkrun_itself():
    declared = {opt for param in command.params for opt in param.opts + param.secondary_opts}
    declared |= {"-h", "--help"}
    for row in HOROVOD_FLAGS:
        if row.handling == NATIVE:
            assert set(row.names) <= declared, row.names


@pytest.mark.parametrize("name, nargs", SPELLINGS)
def test_each_flag_is_taken_or_refused_on_one_line(name, nargs, tmp_path):
    row = by_name()[name]
    argv = [name, *values_for(name, tmp_path)]
    if name not in ("-np", "--num-proc"):
        argv = ["-np", "2"] + argv
    argv += ["python", "train.py"]
    if name in EXITS_AT_ONCE:
        result = CliRunner().invoke(command, [name])
        assert result.exit_code == 0 and result.output.strip(), result.output
        return
    if row.handling == REFUSED:
        result = CliRunner().invoke(command, argv, prog_name="blinkrun")
        assert result.exit_code == 2
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"blinkrun: error: {row.name} is not supported"), lines
        assert row.note in lines[0]
        return
    ctx = command.make_context("blinkrun", argv)
    spec, _ = spec_from_options(ctx, dict(ctx.params), ENV)
    assert spec.np == 2 and spec.command == ("python", "train.py")


def spec_of(argv, tmp_path=None):
    ctx = command.make_context("blinkrun", ["-np", "2", *argv, "python", "train.py"])
    return spec_from_options(ctx, dict(ctx.params), ENV)[0]


def test_native_flags_do_what_horovodrun_does(tmp_path):
    assert spec_of(["--network-interfaces", "eth0,eth1", "--network-interface", "ib0"]).nics == ("eth0", "eth1", "ib0")
    assert spec_of(["-p", "2222", "-i", "/k"]).ssh_port == 2222
    assert spec_of(["--ssh-identity-file", "/k"]).ssh_identity_file == "/k"
    assert spec_of(["--tcp"]).tcp_only and not spec_of([]).tcp_only
    assert spec_of(["--binding-args", "--bind-to core"]).binding_args == ("--bind-to", "core")
    assert spec_of([]).binding_args is None
    assert spec_of(["-prefix-timestamp"]).timestamp_output
    hostfile = tmp_path / "hosts"
    hostfile.write_text("a slots=2\n")
    assert [h.name for h in spec_of(["-hostfile", str(hostfile)]).hosts] == ["a"]
    settings = spec_of(["--no-stall-check"]).settings
    assert settings["BLINKFLOW_STALL_CHECK_TIME_SECONDS"] == "0.0"
    assert settings["BLINKFLOW_STALL_SHUTDOWN_TIME_SECONDS"] == "0.0"
    settings = spec_of(["--no-stall-check", "--stall-check-warning-time-seconds", "9"]).settings
    assert settings["BLINKFLOW_STALL_CHECK_TIME_SECONDS"] == "9.0"


def test_config_file_reads_horovods_yaml_and_the_command_line_wins(tmp_path):
    path = tmp_path / "horovod.yaml"
    path.write_text("# Horovod's example\ncontroller: mpi\nparams:\n  fusion_threshold_mb: 32\n  cycle_time_ms: 2.5\n"
                    "  hierarchical_allreduce: true\ntimeline:\n  filename: /tmp/tl.json\n  mark_cycles: false\n"
                    "stall_check:\n  enabled: false\nautotune:\n  enabled: false\n"
                    "logging:\n  level: 'DEBUG'   # comment\n  with_timestamp: false\n")
    settings = spec_of(["--config-file", str(path)]).settings
    assert settings["BLINKFLOW_FUSION_THRESHOLD"] == str(32 * 1024 * 1024)
    assert settings["BLINKFLOW_CYCLE_TIME"] == "2.5"
    assert settings["BLINKFLOW_TIMELINE"] == "/tmp/tl.json"
    assert settings["BLINKFLOW_LOG_LEVEL"] == "debug"
    assert settings["BLINKFLOW_STALL_SHUTDOWN_TIME_SECONDS"] == "0.0"
    assert settings["BLINKFLOW_AUTOTUNE"] == "0"
    settings = spec_of(["--cycle-time-ms", "7", "--config-file", str(path)]).settings
    assert settings["BLINKFLOW_CYCLE_TIME"] == "7.0"            # given on the command line: it wins
    assert settings["BLINKFLOW_FUSION_THRESHOLD"] == str(32 * 1024 * 1024)


@pytest.mark.parametrize("text, message", [
    ("params:\n  torus_allreduce: true\n", "params.torus_allreduce: --torus-allreduce is not supported"),
    ("library_options:\n  num_nccl_streams: 2\n", "library_options.num_nccl_streams: --num-nccl-streams is not supported"),
    ("controller: gloo\n", "controller: --gloo is not supported"),
    ("params:\n  fusion_treshold_mb: 3\n", "params.fusion_treshold_mb is not one of Horovod's settings"),
    ("params:\n  - 3\n", ":2: expected 'key: value'"),
    ("params:\n  cycle_time_ms: [1, 2]\n", ":2: '[1, 2]' is YAML blinkrun does not read here"),
    ("params:\n  cache_capacity: many\n", "params.cache_capacity: Invalid value for '--cache-capacity'"),
    ("stall_check:\n  enabled: 3\n", "stall_check.enabled='3' is not a switch: write 1, true, yes or on"),
    # read by the flag's own parser, never coerced: false was fusion off, true a 1 ms cycle, 2.9 two entries
    ("params:\n  fusion_threshold_mb: false\n", "params.fusion_threshold_mb: Invalid value for '--fusion-threshold-mb'"),
    ("params:\n  cycle_time_ms: true\n", "params.cycle_time_ms: Invalid value for '--cycle-time-ms': 'true' is not a number"),
    ("params:\n  cache_capacity: 2.9\n", "params.cache_capacity: Invalid value for '--cache-capacity': '2.9' is not a whole"),
    ("autotune:\n  warmup_samples: 1e3\n", "autotune.warmup_samples: Invalid value for '--autotune-warmup-samples'"),
])
def test_config_file_errors_are_one_line_naming_the_setting(tmp_path, text, message):
    path = tmp_path / "horovod.yaml"
    path.write_text(text)
    result = CliRunner().invoke(command, ["-np", "2", "--config-file", str(path), "python", "x.py"],
                                prog_name="blinkrun")
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], lines


@pytest.mark.parametrize("argv, message", [
    (["--cache-capacity", "2.9"], "Invalid value for '--cache-capacity': '2.9' is not a whole number"),
    (["--autotune-warmup-samples", "1e3"], "Invalid value for '--autotune-warmup-samples': '1e3' is not a whole"),
    (["--fusion-threshold-mb", "0.0000001"], "Invalid value for '--fusion-threshold-mb': '0.0000001' is not a whole "
                                            "number of bytes"),
    (["--cycle-time-ms", "nan"], "Invalid value for '--cycle-time-ms': 'nan' is not a finite number"),
])
def test_flags_read_their_values_as_the_environment_does(argv, message):
    result = CliRunner().invoke(command, ["-np", "2", *argv, "python", "x.py"], prog_name="blinkrun")
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], lines


def test_unknown_flags_and_aliases_that_were_misread_before():
    # -cb was read as -c b, -hostfile as -h ostfile; now each is its own option
    names = {opt for param in command.params for opt in param.opts}
    assert {"-cb", "-hostfile", "-prefix-timestamp", "-np", "-v", "-p", "-i", "-H"} <= names
    result = CliRunner().invoke(command, ["-np", "2", "--no-such-flag", "python"], prog_name="blinkrun")
    assert result.exit_code == 2 and len(result.stderr.strip().splitlines()) == 1
    assert by_name()["--gloo"].refusal().count("\n") == 0


def test_autotune_flags_set_the_autotune_settings(tmp_path):
    settings = spec_of(["--autotune", "--autotune-log-file", "/tmp/at.csv", "--autotune-warmup-samples", "2",
                        "--autotune-steps-per-sample", "5", "--autotune-bayes-opt-max-samples", "9",
                        "--autotune-gaussian-process-noise", "0.5"]).settings
    assert settings == {"BLINKFLOW_AUTOTUNE": "1", "BLINKFLOW_AUTOTUNE_LOG_FILE": "/tmp/at.csv",
                        "BLINKFLOW_AUTOTUNE_WARMUP_SAMPLES": "2", "BLINKFLOW_AUTOTUNE_STEPS_PER_SAMPLE": "5",
                        "BLINKFLOW_AUTOTUNE_BAYES_OPT_MAX_SAMPLES": "9", "BLINKFLOW_AUTOTUNE_GAUSSIAN_PROCESS_NOISE": "0.5"}
    assert spec_of(["--no-autotune"]).settings == {"BLINKFLOW_AUTOTUNE": "0"}
    path = tmp_path / "horovod.yaml"
    path.write_text("autotune:\n  enabled: true\n  log_file: /tmp/at.csv\n  warmup_samples: 1\n")
    settings = spec_of(["--config-file", str(path)]).settings
    assert (settings["BLINKFLOW_AUTOTUNE"], settings["BLINKFLOW_AUTOTUNE_LOG_FILE"],
            settings["BLINKFLOW_AUTOTUNE_WARMUP_SAMPLES"]) == ("1", "/tmp/at.csv", "1")
    assert spec_of(["--no-autotune", "--config-file", str(path)]).settings["BLINKFLOW_AUTOTUNE"] == "0"
