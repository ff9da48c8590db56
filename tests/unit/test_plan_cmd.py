"""``blinkrun plan``: JSON fields of DESIGN §3.2, one-line errors with exit 2, the PNG."""
import json
import subprocess
import sys

import pytest

from blinkflow.launcher.commands import plan as plan_cmd


def _run(args):
    with pytest.raises(SystemExit) as e:
        plan_cmd.command.main(args, prog_name="blinkrun plan")
    return e.value.code


def test_json_fields(capsys):
    assert _run(["--topology", "dgx1-v100", "--gpus", "0,1,4", "--collective", "allreduce", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert {"topology", "gpus", "collective", "root", "rate_gbps", "optimal_gbps", "ring_gbps",
            "plan_seconds", "trees"} <= set(d)
    assert d["gpus"] == [0, 1, 4] and d["root"] is None and d["rate_gbps"] == pytest.approx(25.0)
    # make_plan leaves the ring baseline out unless asked; the tool that shows it asks: no NVLink
    # ring among {0, 1, 4}, so a 10 GB/s cross-socket ring, all-reduce 10 * 3 / (2 * 2).
    assert d["ring_gbps"] == pytest.approx(7.5)
    assert all({"root", "fraction", "edges"} <= set(t) for t in d["trees"])


def test_broadcast_root_and_table(capsys):
    assert _run(["--topology", "dgx1-v100", "--collective", "broadcast", "--root", "3"]) == 0
    out = capsys.readouterr().out
    assert "150.00 GB/s" in out and "from 3" in out


def test_topology_file(tmp_path, capsys):
    from blinkflow.topology import save_topology
    from blinkflow.topology.presets import get_preset
    path = tmp_path / "t.json"
    save_topology(get_preset("cpu-host:3"), path)
    assert _run(["--topology", str(path), "--collective", "allgather", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["rate_gbps"] == pytest.approx(30.0)


@pytest.mark.parametrize("args", [
    ["--topology", "nope", "--collective", "allreduce"],
    ["--topology", "dgx1-v100", "--gpus", "0,9", "--collective", "allreduce"],
    ["--topology", "dgx1-v100", "--gpus", "0,x", "--collective", "allreduce"],
    ["--topology", "dgx1-v100", "--collective", "bogus"],
    ["--topology", "dgx1-v100", "--collective", "broadcast", "--gpus", "0,1", "--root", "5"],
    ["--collective", "allreduce"],
])
def test_bad_input_exits_2_with_one_line(args, capsys):
    assert _run(args) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


@pytest.mark.parametrize("gpus, says", [
    ("0,\u00b2", "'\u00b2' is not a device index"),  # str.isdigit() is true for '²', int() fails
    ("0,1_0", "'1_0' is not a device index"),  # int() reads it as 10
    ("0,,1", "'' is not a device index"),
    ("-1", "'-1' is not a device index"),
    ("0,0", "repeats a device"),
])
def test_gpus_list_is_parsed_like_topo_does(gpus, says, capsys):
    assert _run(["--topology", "dgx1-v100", "--gpus", gpus, "--collective", "allreduce"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("blinkrun plan: error: --gpus") and says in err and len(err.splitlines()) == 1


def test_gpus_accepts_spaces(capsys):
    assert _run(["--topology", "dgx1-v100", "--gpus", " 0, 1 ,4", "--collective", "allreduce", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["gpus"] == [0, 1, 4]


def test_png(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    png = tmp_path / "plan.png"
    assert _run(["--topology", "dgx1-v100", "--gpus", "0,1,2,3,4,5", "--collective", "allreduce",
                 "--png", str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_console_script_dispatch():
    out = subprocess.run([sys.executable, "-m", "blinkflow.launcher", "plan", "--topology", "cpu-host:2",
                          "--collective", "allreduce", "--json"], capture_output=True, text=True)
    if out.returncode != 0 and "No module named" in out.stderr:
        pytest.skip("launcher __main__ not runnable here")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["collective"] == "allreduce"


def test_png_without_matplotlib_is_one_line(tmp_path, monkeypatch, capsys):
    # matplotlib is an extra ("plot"): without it --png says so instead of a traceback.
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    assert _run(["--topology", "cpu-host:2", "--collective", "allreduce", "--png", str(tmp_path / "p.png")]) == 2
    err = capsys.readouterr().err
    assert err == "blinkrun plan: error: --png needs matplotlib (pip install 'blinkflow[plot]')\n"


def rate_from_json(d, topology):
    """DESIGN §3.2, as a test outside the repository would apply it to ``plan --json``: load(a) =
    Σ fractions of the trees whose edges (or the routes of routed edges) cross link a; an
    all-reduce also loads each link's opposite; rate = 1 / max load(a) / capacity(a)."""
    routes = {(r["src"], r["dst"], r.get("channel", "main")): r["path"] for r in d.get("routes", ())}
    loads = {}
    for tree in d["trees"]:
        for a, b in tree["edges"]:
            path = routes.get((a, b, tree.get("channel", "main")), [a, b])
            for u, v in zip(path[:-1], path[1:]):
                for link in ([(u, v), (v, u)] if d["collective"] == "allreduce" else [(u, v)]):
                    loads[link] = loads.get(link, 0.0) + tree["fraction"]
    return 1 / max(load / topology.capacity(*link) for link, load in loads.items())


@pytest.mark.parametrize("spec, gpus, collective", [
    ("dgx1-v100", "0,1,4", "allreduce"), ("dgx2", None, "allgather"), ("2xcpu-host:2", None, "broadcast"),
    ("2xcpu-host:2", None, "allreduce"), ("2xdgx1-v100", None, "allreduce"), ("2xdgx1-v100", "0,1,2,8", "allreduce"),
    ("3xcpu-host:2", "0,2,4,5", "allreduce"),
])
def test_json_trees_carry_the_whole_buffer_at_the_reported_rate(spec, gpus, collective, capsys):
    # Multi-host all-reduce printed "trees": [] — fractions summing to 0 and no rate to recompute.
    from blinkflow.topology import get_preset
    args = ["--topology", spec, "--collective", collective, "--json"] + (["--gpus", gpus] if gpus else [])
    assert _run(args) == 0
    d = json.loads(capsys.readouterr().out)
    devices = set(d["gpus"])
    assert sum(t["fraction"] for t in d["trees"]) == pytest.approx(1.0)
    for tree in d["trees"]:  # spanning arborescences of the devices
        children = {b for _, b in tree["edges"]}
        assert len(children) == len(tree["edges"]) == len(devices) - 1 and children | {tree["root"]} == devices
    assert rate_from_json(d, get_preset(spec)) == pytest.approx(d["rate_gbps"])
