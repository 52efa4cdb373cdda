"""Aggregate seed sweeps: a results table (mean, IQM and their 95% bootstrap CIs per agent x env),
learning curves per env, a performance profile across envs and the probability of improvement
between every two groups, with rliable's methods.

    python train.py -m agent=td3,ddpg env=hopper,walker2d seed=0,1,2
    python aggregate.py multirun/2026-11-21/12-00-00                  # -> multirun/.../aggregate/
    python aggregate.py sweep_a sweep_b outputs/2026-11-22/09-00-00 --by buffer --out results/
    python aggregate.py multirun/... --by agent.tau --reps 50000 --seed 1
    python aggregate.py multirun/... --last 5                       # score = mean of the last 5 evaluations
    python aggregate.py multirun/... --episodes 100                 # ... of the last 100 training episodes

The methods and how incomplete runs are handled: analysis/ (its __init__.py).
"""
from __future__ import annotations

import argparse
import sys

from analysis.report import aggregate
from analysis.runs import AggregateError
from analysis.stats import DEFAULT_REPS


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Aggregate the runs under sweep dirs (multirun/<date>/<time>) or run dirs: results.md, "
                    "results.csv, curves_<env>.png and .csv (the points drawn), performance_profile.png and improvement.csv.")
    parser.add_argument("paths", nargs="+", help="sweep dirs or run dirs, searched recursively for runs")
    parser.add_argument("--by", action="append", default=[], metavar="KEY[=VALUE]",
                        help="also group by this key: a config group (buffer, network) or a dotted config key "
                             "(agent.tau); repeat it or separate keys with commas. KEY=VALUE: runs that lack "
                             "the key count as VALUE (--by update_precision=float32 for runs saved before it existed)")
    parser.add_argument("--out", default=None, help="output dir (default: <first path>/aggregate)")
    parser.add_argument("--reps", type=int, default=DEFAULT_REPS,
                        help=f"bootstrap replicates (default {DEFAULT_REPS}; rliable uses 50000)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the bootstrap (default 0)")
    parser.add_argument("--complete-only", action="store_true",
                        help="leave out incomplete runs (no summary.json, or one older than their last evaluation; listed as skipped) instead of counting their last evaluation")
    parser.add_argument("--last", type=int, default=1, metavar="K",
                        help="score each run by the mean return of its last K evaluations (default 1: its final "
                             "return); K > 1 keeps a policy that dips at one evaluation from deciding its score")
    parser.add_argument("--episodes", type=int, default=0, metavar="K",
                        help="score each run by the mean return of its last K training episodes (train.csv), the "
                             "exploring policy's, as CleanRL reports PPO, instead of its evaluations")
    args = parser.parse_args(argv)
    try:
        report = aggregate(args.paths, by=args.by, out=args.out, reps=args.reps, seed=args.seed,
                           complete_only=args.complete_only, last=args.last, episodes=args.episodes)
    except AggregateError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(report.markdown)
    for path in report.files:
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
