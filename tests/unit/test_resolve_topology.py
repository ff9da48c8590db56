"""resolve_topology: presets and files of every format, told apart by content."""
import shutil

import pytest

from blinkflow.errors import TopologyError
from blinkflow.topology import get_preset, resolve_topology, save_topology


def test_presets_including_multi_host_and_cpu_host():
    assert resolve_topology("dgx1-v100") == get_preset("dgx1-v100")
    assert resolve_topology("cpu-host:3").compute_ids == (0, 1, 2)
    assert resolve_topology("2xdgx1-v100").hosts == ("host0", "host1")


def test_files_detected_by_content(tmp_path, fixtures_dir):
    # misleading suffixes on purpose: the content decides
    smi = tmp_path / "a.json"
    shutil.copy(fixtures_dir / "nvidia-smi-topo-hgx-h100.txt", smi)
    xml = tmp_path / "b.txt"
    shutil.copy(fixtures_dir / "nccl-topo-dgx1-v100.xml", xml)
    js = tmp_path / "c.xml"
    save_topology(get_preset("dgx2"), js)
    assert resolve_topology(str(smi)).link(0, "nvswitch").count == 18
    assert resolve_topology(str(xml)).link(0, 3).count == 2
    assert resolve_topology(str(js)) == get_preset("dgx2")


@pytest.mark.parametrize("spec, message", [
    ("dgx9", r"^BLINKFLOW_TOPOLOGY: unknown preset 'dgx9'"),
    ("/no/such/file.json", r"^BLINKFLOW_TOPOLOGY: no file '/no/such/file.json'"),
    ("", r"^BLINKFLOW_TOPOLOGY: empty topology"),
])
def test_bad_spec_names_the_place(spec, message):
    with pytest.raises(TopologyError, match=message):
        resolve_topology(spec, where="BLINKFLOW_TOPOLOGY")


def test_unknown_format_and_bad_json_name_the_file(tmp_path):
    odd = tmp_path / "odd.cfg"
    odd.write_text("just words\n")
    with pytest.raises(TopologyError, match=r"odd.cfg: cannot tell the format"):
        resolve_topology(str(odd))
    bad = tmp_path / "bad.json"
    bad.write_text('{"schema": 1,\n\n ]')
    with pytest.raises(TopologyError, match=r"bad.json: line 3: invalid JSON"):
        resolve_topology(str(bad))


@pytest.mark.parametrize("loader", ["load_topology", "load_nccl_xml", "load_nvidia_smi", "load_any"])
def test_every_loader_names_an_unreadable_file(loader, tmp_path):
    import blinkflow.topology as topology
    missing = str(tmp_path / "gone.json")
    with pytest.raises(TopologyError, match=r"gone\.json: cannot read: No such file"):
        getattr(topology, loader)(missing)


def test_json_loaders_agree_and_name_the_bad_line(tmp_path):
    from blinkflow.topology import load_any, load_topology
    good = tmp_path / "box.json"
    good.write_text(get_preset("dgx1-v100").to_json())
    assert load_topology(str(good)) == load_any(str(good))
    bad = tmp_path / "bad.json"
    bad.write_text('{"schema": 1,\n "nodes": [,]}')
    for load in (load_topology, load_any):
        with pytest.raises(TopologyError, match=r"bad\.json: line 2: invalid JSON"):
            load(str(bad))
