"""The paper suite: symmetries of the DGX-1, and the report it writes."""
import pytest

from blinkflow.bench.cli import main
from blinkflow.bench.paper import automorphisms, subsets
from blinkflow.topology.presets import get_preset


def test_dgx1_symmetries():
    v100, p100 = automorphisms(get_preset("dgx1-v100")), automorphisms(get_preset("dgx1-p100"))
    assert len(v100) == 4 and len(p100) == 16
    identity = {g: g for g in range(8)}
    assert identity in v100
    topo = get_preset("dgx1-v100")
    for g in v100:  # NVLink counts are kept
        for link in topo.links_of_kind("nvlink"):
            assert topo.link(g[link.src], g[link.dst]).count == link.count


def test_symmetric_subsets_share_a_representative():
    topo = get_preset("dgx1-p100")
    reps = {(rep, root) for _, _, rep, root in subsets(topo, [3])}
    assert len(list(subsets(topo, [3]))) == 56 and len(reps) < 56


def test_writes_the_report(tmp_path):
    out = tmp_path / "paper.md"
    with pytest.raises(SystemExit) as exit_:
        main(["paper", "--machines", "dgx1-v100", "--min-gpus", "7", "--max-gpus", "8", "--size", "16000000",
              "--step-budget", "1500", "--output", str(out), "--quiet"])
    assert exit_.value.code == 0
    text = out.read_text()
    assert "up to 8x faster" in text and "2x faster all-reduce" in text
    assert "max broadcast speedup over 4–7 GPU subsets" in text and "median all-reduce speedup" in text
    assert "| dgx1-v100 | 7 | 8 |" in text and "| 0,1,2,3,4,5,6,7 |" in text


def test_writes_only_where_told(tmp_path, monkeypatch, capsys):
    """Without --out the report goes to stdout: nothing lands in the current folder's docs/."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_:
        main(["paper", "--machines", "dgx1-v100", "--min-gpus", "8", "--max-gpus", "8", "--size", "16000000",
              "--step-budget", "1500", "--quiet"])
    assert exit_.value.code == 0
    assert list(tmp_path.iterdir()) == []
    assert "| 0,1,2,3,4,5,6,7 |" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["paper", "--machines", "dgx1-v100", "--min-gpus", "8", "--max-gpus", "8", "--size", "16000000",
              "--step-budget", "1500", "--quiet", "--out", "here.md"])
    assert [p.name for p in tmp_path.iterdir()] == ["here.md"]
