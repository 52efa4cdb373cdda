"""The statistics, from rliable (Agarwal et al. 2021): its metrics and its stratified bootstrap,
behind thin wrappers that take one array of runs per task (tasks may have unequal runs, which
rliable's runs x tasks matrices cannot hold) and make every interval reproducible. The metrics a
bootstrap evaluates once per replicate (IQM, the score distribution, P(X > Y)) are computed here as
rliable computes them, number for number (tests/test_aggregate.py holds them to rliable's own),
without the per-call checks of the scipy functions rliable calls.

rliable is imported where it is used: it loads arch, pandas and statsmodels (seconds), which a
command line with a mistake in it should not wait for.
"""
from __future__ import annotations

import zlib
from contextlib import contextmanager
from typing import Callable, Sequence

import numpy as np

CONFIDENCE = 0.95
DEFAULT_REPS = 10000  # bootstrap replicates (rliable: 50000)
TAUS = np.linspace(0.0, 1.0, 101)  # thresholds of the performance profile (normalized scores)


def seed_for(seed: int, *what: str) -> list[int]:
    """The bootstrap seed of one estimate: (`--seed`, a hash of what it estimates), so an interval
    does not change when other estimates are computed, or other runs join the aggregation."""
    return [int(seed), zlib.crc32("|".join(what).encode())]


@contextmanager
def _numpy_seeded(seed):
    # rliable's bootstraps draw with np.random.choice, numpy's global generator, and never use the
    # random_state they are given: seed the global generator for the call, then put it back.
    state = np.random.get_state()
    np.random.seed(seed)
    try:
        yield
    finally:
        np.random.set_state(state)


def interval(tasks: Sequence, statistic: Callable[..., float | np.ndarray], reps: int = DEFAULT_REPS,
             seed=0, confidence: float = CONFIDENCE) -> tuple[np.ndarray, np.ndarray]:
    """Percentile interval of `statistic(*tasks)` under rliable's stratified bootstrap.

    `tasks` holds one array per task (stratum) whose first axis is the runs. Each replicate
    resamples the runs of every task with replacement, as many as it has, independently per task
    (rliable's `get_interval_estimates` given a list of arrays: `StratifiedIndependentBootstrap`),
    and applies `statistic`, which returns a number or a 1-D array. Columns of a 2-D array (runs x
    eval steps) are resampled apart, as rliable does for learning curves. Returns the (low, high)
    percentiles of the replicates, one entry per output of `statistic`. Draws: numpy's global
    generator seeded with `seed`, then per replicate, per task in order,
    `np.random.choice(n_runs, task.shape)`; the global generator is left as it was."""
    from rliable import library

    tasks = [np.asarray(t, dtype=float) for t in tasks]
    if not tasks or any(len(t) == 0 for t in tasks):
        raise ValueError("every task needs at least one run")
    with _numpy_seeded(seed):
        _, cis = library.get_interval_estimates(
            {"": tasks}, lambda *s: np.atleast_1d(np.asarray(statistic(*s), dtype=float)), reps=reps,
            confidence_interval_size=confidence)
    low, high = cis[""]
    return low, high


def iqm(scores, axis: int | None = None):
    """Interquartile mean, rliable's `aggregate_iqm`: `scipy.stats.trim_mean(scores, 0.25)`, the
    mean of what is left after cutting floor(n/4) scores from each end (the plain mean below 4);
    along `axis` (a learning curve: the IQM over runs at each step), else over all scores.

    Computed as trim_mean computes it, to the last bit: the axis moved last, a partition at the two
    cuts, the mean of the middle. A bootstrap calls this once per replicate, and scipy's checks
    around trim_mean cost far more than the arithmetic; scores holding a NaN go to scipy itself,
    whose NaN rules this does not repeat."""
    scores = np.asarray(scores, dtype=float)
    if scores.size == 0 or np.isnan(scores).any():
        from scipy.stats import trim_mean

        return trim_mean(scores, 0.25, axis=axis)
    scores = scores.ravel() if axis is None else np.moveaxis(scores, axis, -1)
    n = scores.shape[-1]
    cut = n // 4
    return np.mean(np.partition(scores, (cut, n - cut - 1), axis=-1)[..., cut:n - cut], axis=-1)


def _column(scores) -> np.ndarray:
    """One task's scores as rliable's runs x tasks matrix."""
    return np.asarray(scores, dtype=float).reshape(-1, 1)


def aggregate_mean(*tasks) -> float:
    """rliable's aggregate mean: the mean over tasks of each task's mean."""
    from rliable import metrics

    return float(np.mean([metrics.aggregate_mean(_column(t)) for t in tasks]))


def aggregate_iqm(*tasks) -> float:
    """rliable's aggregate IQM: the IQM of all runs of all tasks pooled."""
    return float(iqm(np.concatenate([np.ravel(t) for t in tasks])))


def mean_and_iqm(*tasks) -> np.ndarray:
    """(aggregate mean, aggregate IQM): with one task, the mean and IQM of its runs."""
    return np.array([aggregate_mean(*tasks), aggregate_iqm(*tasks)])


def run_score_distribution(tasks: Sequence, taus=TAUS) -> np.ndarray:
    """F(tau) for each tau: the mean over tasks of rliable's score distribution, the fraction of
    the task's runs with score > tau (with equal runs per task, the fraction of all runs).
    rliable's `score_distributions` is `np.mean(scores > tau)` vectorized over tau by np.vectorize,
    a Python call per tau; this compares every score with every tau at once (the same counts)."""
    taus = np.asarray(taus, dtype=float)
    return np.mean([np.mean(np.asarray(t, dtype=float).reshape(-1, 1) > taus, axis=0) for t in tasks], axis=0)


def performance_profile(tasks: Sequence, taus=TAUS, reps: int = DEFAULT_REPS, seed=0):
    """rliable's run-score performance profile: (F(tau), CI low, CI high) over `taus`. With one run
    per task there is no band (NaN): resampling one run per task would give a band of zero width."""
    point = run_score_distribution(tasks, taus)
    if all(len(t) == 1 for t in tasks):
        return point, np.full_like(point, np.nan), np.full_like(point, np.nan)
    low, high = interval(tasks, lambda *s: run_score_distribution(s, taus), reps, seed)
    return point, low, high


def probability_of_improvement(x_tasks: Sequence, y_tasks: Sequence) -> float:
    """rliable's P(X > Y): the mean over tasks of the probability that a run of X scores above a
    run of Y on that task (the Mann-Whitney U statistic over the pairs, ties counting half)."""
    x_tasks, y_tasks = ([np.asarray(t, dtype=float).ravel() for t in tasks] for tasks in (x_tasks, y_tasks))
    if any(np.isnan(t).any() for t in (*x_tasks, *y_tasks)):  # scipy's NaN rules, through rliable
        from rliable import metrics

        return float(np.mean([metrics.probability_of_improvement(_column(x), _column(y))
                              for x, y in zip(x_tasks, y_tasks)]))
    return float(np.mean([_pairs_won(x, y) for x, y in zip(x_tasks, y_tasks)]))


def _pairs_won(x: np.ndarray, y: np.ndarray) -> float:
    """The fraction of (x, y) run pairs where x scores higher, ties counting half: the U statistic
    that rliable takes from scipy's mannwhitneyu (a sum of ranks, exact in halves as this count
    is) over the pairs, without scipy's per-call checks (a bootstrap calls this 10,000 times)."""
    if np.array_equal(x, y):
        return 0.5  # rliable's shortcut
    return (np.sum(x[:, None] > y) + 0.5 * np.sum(x[:, None] == y)) / (len(x) * len(y))


def probability_of_improvement_ci(x_tasks: Sequence, y_tasks: Sequence, reps: int = DEFAULT_REPS, seed=0):
    """(P(X > Y), CI low, CI high): X's and Y's runs are resampled independently within each task
    (each is a stratum of its own, as rliable resamples them). No interval (NaN) when every task has
    one run of each."""
    n = len(x_tasks)
    if n == 0 or n != len(y_tasks):
        raise ValueError("X and Y need scores on the same tasks, at least one")
    point = probability_of_improvement(x_tasks, y_tasks)
    if all(len(x) == 1 and len(y) == 1 for x, y in zip(x_tasks, y_tasks)):
        return point, np.nan, np.nan
    low, high = interval([*x_tasks, *y_tasks], lambda *s: probability_of_improvement(s[:n], s[n:]), reps, seed)
    return point, float(low[0]), float(high[0])


def minmax_normalize(scores, low: float, high: float) -> np.ndarray:
    """(scores - low) / (high - low); NaN when high == low: with every run at the same score there
    is no range to place a score in (pinning them at 1 would lift the aggregates across envs)."""
    scores = np.asarray(scores, dtype=float)
    if high == low:
        return np.full_like(scores, np.nan)
    return (scores - low) / (high - low)
