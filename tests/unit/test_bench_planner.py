"""The planner benchmark runs and reports what it measured."""
import json

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
