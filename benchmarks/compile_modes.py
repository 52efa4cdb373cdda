"""Whole-loop env steps/s of train.py in eager, graph and XLA modes, side by side in one run.

    uv run python benchmarks/compile_modes.py                       # TD3 on Ant-v5, 5k updates each
    uv run python benchmarks/compile_modes.py --agent ddpg --env hopper --updates 2000

Each mode trains through `train.py` with `learning_starts` random steps followed by `--updates`
steps with one update each; the figure is env steps/s over the update phase only (from the
run's update.csv), so the random warm-up and the evaluations do not count. Results are printed
as a table and written to benchmarks/results/compile_modes_<agent>_<env>_<modes>_<time>.json.
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_mode(agent: str, env: str, mode: str, updates: int, warmup: int, log_every: int) -> dict:
    with tempfile.TemporaryDirectory() as run_dir:
        cmd = [
            sys.executable, "train.py", f"agent={agent}", f"env={env}", f"compile={mode}",
            f"learning_starts={warmup}", f"total_steps={warmup + updates}", f"log_every={log_every}",
            f"eval_every={10 * (warmup + updates)}", "eval_episodes=1", "progress=false",
            "logger.tensorboard=false", f"hydra.run.dir={run_dir}",
        ]
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
        wall = time.perf_counter() - t0
        if proc.returncode != 0:
            raise SystemExit(f"{mode} run failed:\n{proc.stderr[-3000:]}")
        with open(os.path.join(run_dir, "update.csv")) as f:
            rows = [r for r in csv.DictReader(f) if int(r["step"]) > warmup]
    per_interval = [float(r["steps_per_second"]) for r in rows]
    steps = sum(log_every for _ in rows)
    seconds = sum(log_every / v for v in per_interval)
    return {"mode": mode, "update_steps": steps, "steps_per_second": steps / seconds,
            "interval_steps_per_second": per_interval, "process_wall_seconds": wall}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--agent", default="td3")
    p.add_argument("--env", default="ant")
    p.add_argument("--updates", type=int, default=5000)
    p.add_argument("--warmup", type=int, default=1000)
    p.add_argument("--modes", default="eager,graph,xla")
    a = p.parse_args()
    log_every = min(1000, a.updates)
    results = [run_mode(a.agent, a.env, m, a.updates, a.warmup, log_every) for m in a.modes.split(",")]
    base = next((r for r in results if r["mode"] == "eager"), results[0])
    print(f"\n{a.agent} on {a.env}: env steps/s with one update per step ({a.updates} update steps, {platform.processor() or platform.machine()}, {os.cpu_count()} cores)")
    print(f"| mode | steps/s | vs {base['mode']} |\n| --- | --- | --- |")
    for r in results:
        print(f"| {r['mode']} | {r['steps_per_second']:.1f} | {r['steps_per_second'] / base['steps_per_second']:.1f}x |")
    stamp = time.strftime("%Y%m%d-%H%M%S")
    out = os.path.join(ROOT, "benchmarks", "results", f"compile_modes_{a.agent}_{a.env}_{'-'.join(r['mode'] for r in results)}_{stamp}.json")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w") as f:
        json.dump({"agent": a.agent, "env": a.env, "updates": a.updates, "results": results}, f, indent=2)
    print(f"written: {os.path.relpath(out, ROOT)}")


if __name__ == "__main__":
    main()
