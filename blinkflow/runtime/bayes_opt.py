"""Bayesian optimisation of a noisy score over a box, for the autotuner.

A Gaussian process with a squared-exponential kernel models the score over the unit box
``[0, 1]^d``; the next point is the candidate that maximises *expected improvement* over the best
score seen (Snoek, Larochelle and Adams, "Practical Bayesian Optimization of Machine Learning
Algorithms", NeurIPS 2012; the acquisition of Jones, Schonlau and Welch, 1998). Horovod's autotuner
searches its fusion threshold and cycle time the same way. Scores are normalised to zero mean and
unit variance before fitting, so ``noise`` (the observation noise, in those units) means the same
whatever the score's scale: samples of a training job's throughput vary from step to step.

Pure numpy and deterministic (candidates come from a seeded generator), so every run of the same
observations proposes the same point.
"""
from __future__ import annotations

import math
from typing import List, Sequence

import numpy as np

#: Random candidates per proposal, besides a grid: enough to find EI's maximum in two or three
#: dimensions to well within one kernel length.
_CANDIDATES = 2048
_LENGTH_SCALE = 0.25


class BayesianSearch:
    """Propose points of ``[0, 1]^dims`` to evaluate; :meth:`observe` each point's score."""

    def __init__(self, dims: int, noise: float = 0.8, seed: int = 0, xi: float = 0.01):
        if dims < 1:
            raise ValueError("dims must be >= 1")
        self.dims = dims
        self.noise = float(noise)
        self.xi = xi
        """Exploration margin of expected improvement (in normalised score units)."""
        self._rng = np.random.default_rng(seed)
        self.points: List[np.ndarray] = []
        self.scores: List[float] = []

    def observe(self, point: Sequence[float], score: float) -> None:
        self.points.append(np.clip(np.asarray(point, dtype=float), 0.0, 1.0))
        self.scores.append(float(score))

    def best(self) -> np.ndarray:
        """The observed point with the highest score."""
        if not self.points:
            raise ValueError("nothing observed yet")
        return self.points[int(np.argmax(self.scores))]

    def propose(self) -> np.ndarray:
        """The next point: the box's centre first, then the candidate of highest expected
        improvement under the posterior."""
        if not self.points:
            return np.full(self.dims, 0.5)
        candidates = self._candidates()
        mean, std = self.posterior(candidates)
        y = self._normalised_scores()
        gain = mean - y.max() - self.xi
        z = np.where(std > 0, gain / np.where(std > 0, std, 1.0), 0.0)
        ei = np.where(std > 0, gain * _normal_cdf(z) + std * _normal_pdf(z), np.maximum(gain, 0.0))
        return candidates[int(np.argmax(ei))]

    def posterior(self, at: np.ndarray):
        """(mean, standard deviation) of the normalised score at the rows of ``at``."""
        x = np.stack(self.points)
        y = self._normalised_scores()
        k = _kernel(x, x) + (self.noise ** 2 + 1e-9) * np.eye(len(x))
        chol = np.linalg.cholesky(k)
        alpha = np.linalg.solve(chol.T, np.linalg.solve(chol, y))
        k_star = _kernel(at, x)
        mean = k_star @ alpha
        v = np.linalg.solve(chol, k_star.T)
        var = np.clip(1.0 - np.sum(v * v, axis=0), 0.0, None)
        return mean, np.sqrt(var)

    def _normalised_scores(self) -> np.ndarray:
        y = np.asarray(self.scores, dtype=float)
        spread = y.std()
        return (y - y.mean()) / (spread if spread > 0 else 1.0)

    def _candidates(self) -> np.ndarray:
        per_axis = max(2, int(round(64 ** (1.0 / self.dims))))
        axes = np.meshgrid(*[np.linspace(0.0, 1.0, per_axis)] * self.dims, indexing="ij")
        grid = np.stack([a.ravel() for a in axes], axis=1)
        return np.concatenate([grid, self._rng.random((_CANDIDATES, self.dims))])


def _kernel(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    d2 = np.sum((a[:, None, :] - b[None, :, :]) ** 2, axis=2)
    return np.exp(-0.5 * d2 / _LENGTH_SCALE ** 2)


def _normal_pdf(z: np.ndarray) -> np.ndarray:
    return np.exp(-0.5 * z * z) / math.sqrt(2 * math.pi)


def _normal_cdf(z: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + _erf(z / math.sqrt(2.0)))


def _erf(x: np.ndarray) -> np.ndarray:
    """Vectorised error function (math.erf per element; a few thousand candidates)."""
    return np.vectorize(math.erf, otypes=[float])(x)
