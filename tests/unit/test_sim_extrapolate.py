"""NCCL's ring over many identical hosts, read off the same ring on 2 and 4 hosts (sim/extrapolate):
the prediction against the full event simulation where both run."""
import pytest

from blinkflow.sim import extrapolate
from blinkflow.sim.baselines import nccl_double_tree, nccl_ring, simulate_baseline
from blinkflow.sim.compare import compare
from blinkflow.topology.presets import get_preset


@pytest.fixture(scope="module")
def eight():
    return get_preset("8xdgx1-v100")


@pytest.mark.parametrize("size", [16_000_000, 2_000_000])
def test_extrapolated_ring_matches_the_full_simulation(eight, size):
    ring = nccl_ring(eight, eight.compute_ids, "allreduce")
    job = ring.largest_job(size // 4)
    full = simulate_baseline(ring, eight, size, chunk_elems=job).result.seconds
    named, tuned = extrapolate.extrapolated_ring(ring, eight, size)
    assert tuned.result.seconds == pytest.approx(full, rel=0.02)
    assert "extrapolated" in named.name and tuned.chunk_elems == job


def test_one_chunk_steps_counts_what_lowering_emits(eight):
    for b in (nccl_ring(eight, eight.compute_ids, "allreduce"), nccl_double_tree(eight, eight.compute_ids),
              nccl_ring(eight, eight.compute_ids, "broadcast")):
        schedule = b.lower(10**6, b.largest_job(10**6))
        assert extrapolate.one_chunk_steps(b) == sum(len(steps) for _, steps in schedule.programs)


def test_only_large_rings_over_identical_hosts_are_extrapolated(eight, monkeypatch):
    ring = nccl_ring(eight, eight.compute_ids, "allreduce")
    assert not extrapolate.extrapolates(ring, eight, 30000)  # 64 GPUs: simulated step by step
    monkeypatch.setattr(extrapolate, "RING_STEP_LIMIT", 1000)
    assert extrapolate.extrapolates(ring, eight, 30000)
    assert not extrapolate.extrapolates(ring, eight, 10**9)  # the caller's budget covers it
    ragged = [d for d in eight.compute_ids if d != 63]
    assert not extrapolate.extrapolates(nccl_ring(eight, ragged, "allreduce"), eight, 30000)
    assert not extrapolate.extrapolates(nccl_double_tree(eight, eight.compute_ids), eight, 30000)
    assert not extrapolate.extrapolates(nccl_ring(eight, eight.compute_ids, "allgather"), eight, 30000)
    four = get_preset("4xdgx1-v100")
    assert not extrapolate.extrapolates(nccl_ring(four, four.compute_ids, "allreduce"), four, 30000)


def test_compare_names_an_extrapolated_baseline(eight, monkeypatch):
    monkeypatch.setattr(extrapolate, "RING_STEP_LIMIT", 1000)
    row = compare(eight, "allreduce", 64_000_000, latency=False)
    if row.baseline_name.startswith("nccl-ring"):
        assert row.baseline_name == "nccl-ring (extrapolated from 2 and 4 hosts)"
    assert row.to_json()["baseline"]["name"] == row.baseline_name


def test_bench_scale_table_and_plot(tmp_path):
    import json

    from click.testing import CliRunner

    from blinkflow.bench.cli import main
    png = tmp_path / "scale.png"
    result = CliRunner().invoke(main, ["scale", "--topology", "2xdgx1-v100", "--smallest", "1024", "--size", "65536",
                                       "--json", "--png", str(png)])
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in result.output.splitlines()]
    assert [r["size_bytes"] for r in rows] == [1024, 4096, 16384, 65536]
    for r in rows:
        assert r["best"] == min(("blinkflow", "nccl-ring", "nccl-tree"), key=lambda a: r[a])
        assert r["ring_method"] == "nccl-ring"  # two hosts: simulated step by step
    assert png.read_bytes()[:4] == b"\x89PNG"
