"""``blinkrun simulate``: every preset, a user topology file, the JSON contract, the sweep and
the plot, one-line errors with exit status 2."""
import json

import pytest

from blinkflow.launcher.cli import main
from blinkflow.launcher.commands.simulate import parse_size
from blinkflow.topology.presets import get_preset, preset_names

KEYS = {"topology", "gpus", "collective", "size_bytes", "blinkflow", "baseline", "speedup", "policy"}


def _run(capsys, *argv):
    with pytest.raises(SystemExit) as exit_:
        main(["simulate", *argv])
    out, err = capsys.readouterr()
    return exit_.value.code, out, err


@pytest.mark.parametrize("preset", preset_names())
def test_every_preset_prints_the_design_json(capsys, preset):
    code, out, err = _run(capsys, "--topology", preset, "--collective", "allreduce", "--size", "1MB", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert set(doc) == KEYS
    assert set(doc["blinkflow"]) == {"seconds", "algbw_gbps", "busbw_gbps"}
    assert set(doc["baseline"]) == {"name", "seconds", "algbw_gbps", "busbw_gbps"}
    assert doc["size_bytes"] == 10**6 and doc["gpus"] == list(get_preset(preset).compute_ids)
    assert doc["speedup"] == pytest.approx(doc["baseline"]["seconds"] / doc["blinkflow"]["seconds"])
    assert doc["blinkflow"]["algbw_gbps"] == pytest.approx(1e6 / doc["blinkflow"]["seconds"] / 1e9)


def test_a_user_topology_file_and_a_subset(capsys, tmp_path):
    path = tmp_path / "mine.json"
    path.write_text(get_preset("dgx1-p100").to_json())
    code, out, err = _run(capsys, "--topology", str(path), "--gpus", "1,2,6", "--collective", "broadcast",
                          "--root", "6", "--size", "64MiB", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["gpus"] == [1, 2, 6] and doc["size_bytes"] == 64 * 2**20
    assert doc["speedup"] > 1.5  # no NVLink ring among 1, 2, 6: NCCL falls back to PCIe


def test_two_hosts(capsys):
    code, out, err = _run(capsys, "--topology", "2xcpu-host:2", "--collective", "allreduce", "--size", "4MB")
    assert code == 0, err
    assert "speedup" in out and "blinkflow (three-phase)" in out


def test_sweep_shows_the_crossover_and_plots(capsys, tmp_path):
    png = tmp_path / "t.png"
    code, out, err = _run(capsys, "--topology", "dgx1-v100", "--gpus", "0,1,2,3", "--collective", "allreduce",
                          "--size", "64MiB", "--sweep", "--png", str(png))
    assert code == 0, err
    rows = [line for line in out.splitlines() if line.strip().endswith(("latency", "bandwidth"))]
    assert rows[0].endswith("latency") and rows[-1].endswith("bandwidth")
    assert "1KiB" in out and "64MiB" in out and "crossover" in out
    assert png.read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize("argv, fragment", [
    (["--topology", "nope", "--collective", "allreduce"], "unknown preset"),
    (["--topology", "/no/such/file.json", "--collective", "allreduce"], "no file"),
    (["--topology", "dgx1-v100", "--collective", "alltoall"], "alltoall"),
    (["--topology", "dgx1-v100", "--collective", "allreduce", "--size", "12XB"], "byte size"),
    (["--topology", "dgx1-v100", "--collective", "allreduce", "--gpus", "0,x"], "not a device index"),
    (["--topology", "dgx1-v100", "--collective", "allreduce", "--gpus", "0,9"], "device 9"),
    (["--topology", "dgx1-v100", "--collective", "allreduce", "--gpus", "3"], "at least 2 devices"),
    (["--topology", "dgx1-v100", "--collective", "broadcast", "--root", "9"], "root 9"),
    (["--collective", "allreduce"], "--topology"),
])
def test_bad_input_is_one_line_and_exit_2(capsys, argv, fragment):
    code, out, err = _run(capsys, *argv)
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and fragment in err and "Traceback" not in err


def test_bad_topology_file_is_one_line(capsys, tmp_path):
    path = tmp_path / "bad.json"
    path.write_text('{"schema": 1, "nodes": [], "links": []}')
    code, _, err = _run(capsys, "--topology", str(path), "--collective", "allreduce")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "bad.json" in err


def test_parse_size():
    assert parse_size("256MB") == 256 * 10**6
    assert parse_size("1GiB") == 2**30 and parse_size("4096") == 4096 and parse_size("1.5KB") == 1500
