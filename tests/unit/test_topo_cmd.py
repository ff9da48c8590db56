"""``blinkrun topo``: output, --gpus, --json, and one-line errors with exit status 2."""
import json
import os
import subprocess
import sys

import pytest
from click.testing import CliRunner

from blinkflow.launcher.commands.topo import command


def run(*args):
    return CliRunner().invoke(command, list(args), prog_name="blinkrun topo")


def nvlinks(data):
    return sorted((l["src"], l["dst"], l["count"], l["gbps"]) for l in data["links"] if l["kind"] == "nvlink")


def test_capture_and_preset_give_the_same_nvlinks(fixtures_dir):
    from_capture = run("--nvidia-smi-file", str(fixtures_dir / "nvidia-smi-topo-dgx1-v100.txt"), "--json")
    from_preset = run("--preset", "dgx1-v100", "--json")
    assert from_capture.exit_code == 0 and from_preset.exit_code == 0
    a, b = json.loads(from_capture.stdout), json.loads(from_preset.stdout)
    assert nvlinks(a) == nvlinks(b) and len(nvlinks(a)) == 32
    assert a["schema"] == 1 and {n["kind"] for n in a["nodes"]} == {"gpu", "switch", "socket", "nic"}


def test_table_shows_nvlink_pcie_and_switch_cells(fixtures_dir):
    out = run("--preset", "dgx1-v100").stdout
    rows = {line.split()[0]: line.split()[1:] for line in out.splitlines() if line.startswith("GPU0")}
    assert rows["GPU0"][:8] == ["X", "NV1/25", "NV1/25", "NV2/50", "NV2/50", "SYS/10", "SYS/10", "SYS/10"]
    assert "Legend:" in out and "pcie0: pcie switch" in out
    h100 = run("--file", str(fixtures_dir / "nvidia-smi-topo-hgx-h100.txt"), "--gpus", "0,5").stdout
    assert "NVS18/450" in h100 and "GPU5" in h100 and "GPU3" not in h100


def test_gpus_subsets_json(fixtures_dir):
    result = run("--nccl-xml", str(fixtures_dir / "nccl-topo-dgx1-v100.xml"), "--gpus", "0,1,4", "--json")
    data = json.loads(result.stdout)
    assert [n["id"] for n in data["nodes"] if n["kind"] == "gpu"] == [0, 1, 4]
    assert nvlinks(data) == [(0, 1, 1, 25.0), (0, 4, 2, 50.0), (1, 0, 1, 25.0), (4, 0, 2, 50.0)]


@pytest.fixture
def bad_files(tmp_path):
    xml = tmp_path / "dump.xml"
    xml.write_text('<system>\n<cpu>\n<pci busid="0000:01:00.0"\n</system>\n')
    smi = tmp_path / "topo.txt"
    smi.write_text("\tGPU0\tGPU1\nGPU0\tX\tNV1\nGPU1\tNV9\tX\n")
    return {"xml": str(xml), "smi": str(smi), "missing": str(tmp_path / "nope.json")}


@pytest.mark.parametrize("args, says", [
    (["--preset", "dgx7"], "unknown preset 'dgx7'"),
    (["--preset", "dgx1-v100", "--gpus", "0,8"], "--gpus: device 8 is not in topology"),
    (["--preset", "dgx1-v100", "--gpus", "0,x"], "'x' is not a device index"),
    (["--preset", "dgx1-v100", "--gpus", "0,\u00b2"], "'\u00b2' is not a device index"),
    (["--nccl-xml", "{xml}"], "dump.xml: line 4: malformed XML"),
    (["--nvidia-smi-file", "{smi}"], "topo.txt: line 3: GPU1->GPU0 is NV9"),
    (["--file", "{missing}"], "nope.json: cannot read"),
    (["--preset", "dgx2", "--file", "{smi}"], "--preset and --file both name a topology"),
    (["--no-such-flag"], "No such option"),
])
def test_bad_input_exits_2_with_one_line(bad_files, args, says):
    result = run(*[a.format(**bad_files) for a in args])
    assert result.exit_code == 2
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("blinkrun topo: error: ") and says in lines[0]


def test_real_blinkrun_process_reports_one_line(tmp_path):
    beside = os.path.join(os.path.dirname(sys.executable), "blinkrun")
    argv = [beside] if os.path.exists(beside) else [sys.executable, "-m", "blinkflow.launcher.cli"]
    bad = subprocess.run(argv + ["topo", "--preset", "dgx1-v100", "--gpus", "3,11"],
                         capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert bad.returncode == 2 and bad.stdout == ""
    assert bad.stderr.strip().splitlines() == [
        "blinkrun topo: error: --gpus: device 11 is not in topology 'dgx1-v100' (devices: 0,1,2,3,4,5,6,7)"]
    good = subprocess.run(argv + ["topo", "--preset", "dgx1-v100"], capture_output=True, text=True,
                          timeout=60, cwd=tmp_path)
    assert good.returncode == 0 and "NV2/50" in good.stdout


def test_live_probe_honours_cuda_visible_devices(monkeypatch, fixtures_dir):
    from blinkflow.launcher.commands import topo as topo_cmd
    from blinkflow.topology import load_nvidia_smi

    monkeypatch.setattr(topo_cmd, "probe_host_topology",
                        lambda: load_nvidia_smi(fixtures_dir / "nvidia-smi-topo-dgx1-v100.txt"))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    data = json.loads(run("--json").stdout)
    assert [n["id"] for n in data["nodes"] if n["kind"] == "gpu"] == [2, 3]
    assert nvlinks(data) == [(2, 3, 2, 50.0), (3, 2, 2, 50.0)]


def test_live_probe_without_gpu_shows_the_cpu_host(monkeypatch):
    from blinkflow.launcher.commands import run as run_cmd, topo as topo_cmd

    monkeypatch.setattr(topo_cmd, "probe_host_topology", lambda: None)
    monkeypatch.setattr(run_cmd, "local_cores", lambda: 3)
    result = run()
    assert result.exit_code == 0, result.output
    assert result.stderr.count("\n") == 1 and "no NVIDIA GPU found" in result.stderr
    assert "cpu-host:3" in result.stderr and "CPU0    X       SHM" in result.stdout
    data = json.loads(run("--json").stdout)
    assert [n["kind"] for n in data["nodes"] if n["kind"] == "cpu"] == ["cpu"] * 3


@pytest.mark.parametrize("args, says", [
    (["--probe"], "--probe needs the hosts to measure"),
    (["-H", "a,b"], "add --probe"),
    (["--probe", "-H", "a"], "names one host"),
    (["--probe", "-H", "a,b", "--preset", "dgx1-v100"], "it takes only -H"),
    (["--probe", "-H", "a,,b"], "-H"),
])
def test_probe_usage_errors_say_how_to_call_it(args, says):
    result = run(*args)
    assert result.exit_code == 2, result.output
    assert says in result.output, result.output
