"""The autotuner's search and its sampling, on a clock and scores the test controls, and the
negotiation that carries its settings to every rank."""
import numpy as np
import pytest

from blinkflow.config import Config
from blinkflow.errors import ConfigError
from blinkflow.runtime.autotune import CYCLE_RANGE_MS, FUSION_RANGE, LOG_HEADER, Autotuner, Knobs
from blinkflow.runtime.bayes_opt import BayesianSearch


def test_bayesian_search_finds_the_peak_of_a_smooth_score_in_few_samples():
    peak = np.array([0.8, 0.3])

    def score(x):
        return float(np.exp(-8 * np.sum((np.asarray(x) - peak) ** 2)))

    search = BayesianSearch(dims=2, noise=0.05)
    for _ in range(20):
        x = search.propose()
        search.observe(x, score(x))
    assert np.linalg.norm(search.best() - peak) < 0.15
    assert score(search.best()) > 0.85


def test_bayesian_search_beats_the_centre_it_starts_from():
    search = BayesianSearch(dims=1, noise=0.1)
    assert search.propose() == pytest.approx([0.5])
    f = lambda x: -(x[0] - 0.1) ** 2  # noqa: E731
    for _ in range(10):
        x = search.propose()
        search.observe(x, f(x))
    assert abs(search.best()[0] - 0.1) < 0.1


def test_bayesian_search_is_deterministic():
    def run():
        s = BayesianSearch(dims=2, noise=0.8)
        out = []
        for i in range(6):
            x = s.propose()
            s.observe(x, float(np.sin(7 * x[0]) + x[1]))
            out.append(tuple(x))
        return out

    assert run() == run()


def test_knobs_round_trip_through_the_unit_box_and_stay_in_range():
    for knobs in (Knobs(FUSION_RANGE[0], CYCLE_RANGE_MS[0]), Knobs(64 << 20, 20.0), Knobs(FUSION_RANGE[1], 50.0)):
        again = Knobs.at(knobs.point())
        assert abs(again.fusion_threshold - knobs.fusion_threshold) <= 4096
        assert again.cycle_time_ms == pytest.approx(knobs.cycle_time_ms, rel=1e-3)
    far = Knobs.at([7.0, -3.0])
    assert far.fusion_threshold == FUSION_RANGE[1] and far.cycle_time_ms == CYCLE_RANGE_MS[0]


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def drive(tuner, clock, throughput, cycles):
    """Run ``cycles`` cycles of 1 MB each, each taking 1 MB / throughput(knobs in force)."""
    changes = []
    for _ in range(cycles):
        clock.now += 1e6 / throughput(tuner.current)
        new = tuner.observe(10 ** 6)
        if new is not None:
            changes.append(new)
    return changes


def test_the_tuner_warms_up_samples_and_keeps_the_best(tmp_path):
    log = tmp_path / "autotune.csv"
    clock = Clock()
    best_fusion = 8 << 20

    def throughput(knobs):  # peaks at 8 MiB, indifferent to the cycle time
        return 1e9 * np.exp(-abs(np.log2(knobs.fusion_threshold / best_fusion)) / 2)

    tuner = Autotuner(Knobs(64 << 20, 20.0), warmup_samples=2, steps_per_sample=3, max_samples=12,
                      noise=0.1, log_file=str(log), clock=clock)
    drive(tuner, clock, throughput, 4 * (2 + 12) + 10)
    assert tuner.done
    rows = log.read_text().splitlines()
    assert rows[0] == LOG_HEADER
    phases = [r.split(",")[1] for r in rows[1:]]
    assert phases == ["warmup"] * 2 + ["sample"] * 12 + ["best"]
    kept = int(rows[-1].split(",")[2])
    assert abs(np.log2(kept / best_fusion)) < 1.0, f"kept {kept} bytes"
    assert tuner.current.fusion_threshold == kept
    assert tuner.observe(10 ** 6) is None  # done: no more changes


def test_the_first_sample_scores_the_settings_the_job_started_with():
    clock = Clock()
    tuner = Autotuner(Knobs(64 << 20, 20.0), warmup_samples=0, steps_per_sample=2, max_samples=5, clock=clock)
    drive(tuner, clock, lambda k: 1e9, 3)
    assert tuner.search.points[0] == pytest.approx(Knobs(64 << 20, 20.0).point())


def test_autotune_settings_are_checked():
    assert Config.from_env({"BLINKFLOW_AUTOTUNE": "1"}).autotune == 1
    with pytest.raises(ConfigError, match="BLINKFLOW_AUTOTUNE must be 0 or 1"):
        Config(autotune=2)
    with pytest.raises(ConfigError, match="BLINKFLOW_AUTOTUNE_STEPS_PER_SAMPLE"):
        Config(autotune_steps_per_sample=0)
    assert "autotune" in dict(Config().agreed())
