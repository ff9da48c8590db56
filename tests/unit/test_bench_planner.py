"""The planner benchmark runs and reports what it measured."""
import json

import pytest
from click.testing import CliRunner

from blinkflow.bench.cli import main


def test_bench_planner_json_smoke():
    result = CliRunner().invoke(main, ["planner", "--preset", "cpu-host:4", "--preset", "2xcpu-host:2",
                                       "--repeat", "1", "--full-only", "--json"])
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in result.output.splitlines()]
    assert {(r["preset"], r["collective"]) for r in rows} == {
        ("cpu-host:4", "broadcast"), ("cpu-host:4", "allgather"), ("cpu-host:4", "allreduce"),
        ("2xcpu-host:2", "allreduce")}
    for r in rows:
        assert r["median_ms"] > 0 and r["rate_gbps"] <= r["optimal_gbps"] * (1 + 1e-9)


def test_bench_planner_table():
    result = CliRunner().invoke(main, ["planner", "--preset", "dgx1-v100", "--repeat", "1", "--full-only"])
    assert result.exit_code == 0, result.output
    assert "| dgx1-v100 | 8 | broadcast |" in result.output and "# machine:" in result.output


def test_bench_planner_scale_json_and_plot(tmp_path):
    png = tmp_path / "scale.png"
    result = CliRunner().invoke(main, ["planner", "--scale", "--preset", "dgx1-v100", "--max-hosts", "4",
                                       "--repeat", "1", "--json", "--png", str(png)])
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in result.output.splitlines()]
    assert [(r["preset"], r["gpus"], r["collective"]) for r in rows] == [
        ("2xdgx1-v100", 16, "allreduce"), ("2xdgx1-v100", 16, "broadcast"),
        ("4xdgx1-v100", 32, "allreduce"), ("4xdgx1-v100", 32, "broadcast")]
    for r in rows:
        assert r["wall_s"] > 0 and r["cpu_s"] > 0 and r["rate_gbps"] == pytest.approx(r["optimal_gbps"])
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bench_planner_scale_host_counts():
    from blinkflow.bench.planner_scale import host_counts
    assert host_counts(128) == [2, 4, 8, 16, 32, 64, 128]
    assert host_counts(12) == [2, 4, 8, 12] and host_counts(2) == [2]
