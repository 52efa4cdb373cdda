"""How much aggregate.py's bootstrap CIs move with the bootstrap's own seed, and what a CI costs,
for a number of replicates (`--reps`).

    uv run python labs/bootstrap_noise/bootstrap_noise.py --reps 2000 10000 50000     # from the repository's root

For 10 runs of one task (normal scores, mean 1000, sd 300) it computes the 95% CI of the mean and
of the IQM with 10 bootstrap seeds, and prints each endpoint's standard deviation over the seeds
as a percentage of the mean CI width, and the seconds per CI (both statistics).
"""
from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))  # the root: analysis/

import numpy as np

from analysis.stats import interval, mean_and_iqm


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, nargs="+", default=[2000, 10000, 50000])
    p.add_argument("--runs", type=int, default=10)
    p.add_argument("--seeds", type=int, default=10)
    a = p.parse_args()
    scores = np.random.default_rng(123).normal(1000, 300, size=a.runs)
    interval([scores], mean_and_iqm, 1)  # rliable's import (seconds) before the clock starts
    print(f"{a.runs} runs, {a.seeds} bootstrap seeds\n| reps | mean: low, high (% of width) | IQM: low, high | s per CI |\n|---|---|---|---|")
    for reps in a.reps:
        t0 = time.perf_counter()
        ends = np.array([interval([scores], mean_and_iqm, reps, seed) for seed in range(a.seeds)])
        seconds = (time.perf_counter() - t0) / a.seeds
        rel = 100 * ends.std(axis=0) / (ends[:, 1] - ends[:, 0]).mean(axis=0)  # (low/high, mean/IQM)
        print(f"| {reps} | {rel[0, 0]:.2f}, {rel[1, 0]:.2f} | {rel[0, 1]:.2f}, {rel[1, 1]:.2f} | {seconds:.3f} |")


if __name__ == "__main__":
    main()
