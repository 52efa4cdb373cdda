"""Whole-loop env steps/s of this checkout against another checkout (the commit a change started
from), whole `train.py` processes alternating, so that the machine's drift hits both alike.

    git worktree add ../base <commit> && (cd ../base && uv sync --frozen)
    uv run python benchmarks/ab_commits.py --base ../base --rounds 5 --name td3_ant \\
        --common agent=td3 env=ant learning_starts=1000 total_steps=6000 \\
        --this logger.every=1000 logger.progress=false checkpoint.every=0 logger.tensorboard=false \\
        --other log_every=1000 progress=false checkpoint_every=0 logger.tensorboard=false

`--this` and `--other` are each side's own overrides (a config's keys can move between commits).
Each process logs steps/s every logging interval; a run's figure is the median of its intervals
after the first `--skip` (set it to cover the random steps before learning_starts and the interval
that holds the tracing: 2 with the example's learning_starts=1000 and interval 1000), and a side's
figure the median over rounds. Each side
runs with its own checkout's venv (`<checkout>/.venv/bin/python`). Prints a table, writes JSON.
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def python_of(checkout: str) -> str:
    venv = os.path.join(checkout, ".venv", "bin", "python")
    return venv if os.path.exists(venv) else sys.executable


def run_rate(checkout: str, overrides: list[str], eval_every: int, skip: int) -> float:
    """Median env steps/s over the logged intervals after the first `skip` of one train.py process."""
    with tempfile.TemporaryDirectory() as run_dir:
        cmd = [python_of(checkout), "train.py", f"hydra.run.dir={run_dir}", f"eval_every={eval_every}",
               "eval_episodes=1", *overrides]
        proc = subprocess.run(cmd, cwd=checkout, capture_output=True, text=True)
        if proc.returncode != 0:
            sys.exit(f"error: {' '.join(cmd)} failed in {checkout}; nothing was measured:\n{proc.stderr[-3000:]}")
        with open(os.path.join(run_dir, "update.csv")) as f:
            rates = [float(r["steps_per_second"]) for r in csv.DictReader(f)]
    if len(rates) < skip + 2:
        sys.exit(f"error: {len(rates)} logged intervals; raise total_steps so that at least 2 follow the {skip} skipped.")
    return statistics.median(rates[skip:])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--base", required=True, help="the other checkout (with its own .venv)")
    p.add_argument("--common", nargs="*", default=[], help="overrides both sides take")
    p.add_argument("--this", nargs="*", default=[], help="overrides only this checkout takes")
    p.add_argument("--other", nargs="*", default=[], help="overrides only the other checkout takes")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--skip", type=int, default=2, help="logged intervals not counted (random steps, tracing)")
    p.add_argument("--eval-every", type=int, default=10**9, help="no evaluation but the first and the last")
    p.add_argument("--name", default="ab")
    p.add_argument("--output", default=None)
    a = p.parse_args()
    if not os.path.isdir(a.base) or a.rounds < 1:
        sys.exit(f"error: --base must be a checkout directory and --rounds >= 1 (got {a.base!r}, {a.rounds}).")
    sides = {"this": (ROOT, [*a.common, *a.this]), "other": (os.path.abspath(a.base), [*a.common, *a.other])}
    rates: dict[str, list[float]] = {s: [] for s in sides}
    for r in range(a.rounds):
        for side, (checkout, overrides) in (sides.items() if r % 2 == 0 else reversed(sides.items())):
            rates[side].append(run_rate(checkout, overrides, a.eval_every, a.skip))
            print(f"round {r + 1}: {side:5s} {rates[side][-1]:8.1f} env steps/s", flush=True)
    med = {s: statistics.median(v) for s, v in rates.items()}
    ratios = [t / o for t, o in zip(rates["this"], rates["other"])]
    print(f"\n{a.name}: {' '.join(a.common)}; median of {a.rounds} rounds, alternating\n"
          "| side | env steps/s | rounds |\n|---|---|---|")
    for side, v in rates.items():
        print(f"| {side} ({sides[side][0]}) | {med[side]:.1f} | {', '.join(f'{x:.0f}' for x in v)} |")
    print(f"this / other: {med['this'] / med['other']:.3f} (median of the per-round ratios {statistics.median(ratios):.3f})")
    path = a.output or os.path.join(ROOT, "labs", "ab", f"ab_{a.name}.json")
    with open(path, "w") as f:
        json.dump({"common": a.common, "this": a.this, "other": a.other, "base": a.base, "rounds": rates,
                   "median": med, "ratio": med["this"] / med["other"], "round_ratios": ratios}, f, indent=1)
    print(f"written: {path}")


if __name__ == "__main__":
    main()
