"""tfrl's PPO against Stable-Baselines3's, side by side on this machine: env steps/s of a rollout
(collecting it and its whole update) with CleanRL's MuJoCo recipe on both sides (benchmarks/
sb3_ppo_throughput.py for SB3's), the median of the rollouts after the first of each run. The two
run alternately, `--rounds` times each, so that a busy spell hits both; the table gives the medians
of the rounds and their ratio.

    bash benchmarks/setup_sb3.sh        # once
    uv run python benchmarks/compare_ppo.py --env hopper --rounds 3 [--out labs/records/ppo_sb3_hopper.json]
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
SB3_PYTHON = os.path.join(ROOT, "benchmarks", ".venv-sb3", "bin", "python")
ENV_IDS = {"hopper": "Hopper-v5", "halfcheetah": "HalfCheetah-v5", "walker2d": "Walker2d-v5", "ant": "Ant-v5",
           "inverted_pendulum": "InvertedPendulum-v5"}


def tfrl_rate(env: str, rollouts: int, n_steps: int) -> float:
    with tempfile.TemporaryDirectory() as run_dir:
        cmd = [sys.executable, "train.py", "agent=ppo", f"env={env}", f"hydra.run.dir={run_dir}",
               f"total_steps={n_steps * (rollouts + 1)}", f"agent.n_steps={n_steps}", "eval_every=100000000",
               "eval_episodes=1", "checkpoint.every=0", "logger.progress=false", "logger.tensorboard=false"]
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=3600)
        if proc.returncode:
            sys.exit(f"error: tfrl's run failed:\n{proc.stderr[-3000:]}")
        with open(os.path.join(run_dir, "update.csv")) as f:
            rates = [float(r["steps_per_second"]) for r in csv.DictReader(f)][1:]
    return statistics.median(rates)


def sb3_rate(env: str, rollouts: int, n_steps: int) -> float:
    cmd = [SB3_PYTHON, "benchmarks/sb3_ppo_throughput.py", ENV_IDS[env], "--rollouts", str(rollouts), "--n-steps",
           str(n_steps)]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=3600)
    if proc.returncode:
        sys.exit(f"error: SB3's run failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])["steps_per_second"]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--env", default="hopper", choices=sorted(ENV_IDS))
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--rollouts", type=int, default=5, help="timed rollouts per run, after a first one")
    p.add_argument("--n-steps", type=int, default=2048)
    p.add_argument("--out", help="write the record here (JSON)")
    a = p.parse_args()
    if not os.path.exists(SB3_PYTHON):
        sys.exit(f"error: {SB3_PYTHON} does not exist; make SB3's venv first: bash benchmarks/setup_sb3.sh")
    rounds = []
    for r in range(a.rounds):
        rounds.append({"tfrl": tfrl_rate(a.env, a.rollouts, a.n_steps), "sb3": sb3_rate(a.env, a.rollouts, a.n_steps)})
        print(f"round {r + 1}: tfrl {rounds[-1]['tfrl']:.0f}, sb3 {rounds[-1]['sb3']:.0f} env steps/s", flush=True)
    tfrl, sb3 = (statistics.median(x[k] for x in rounds) for k in ("tfrl", "sb3"))
    print(f"| {a.env} | tfrl {tfrl:.0f} | SB3 {sb3:.0f} | {tfrl / sb3:.2f}x |")
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"env": a.env, "rounds": rounds, "tfrl": tfrl, "sb3": sb3, "ratio": tfrl / sb3,
                       "command": " ".join(sys.argv)}, f, indent=1)


if __name__ == "__main__":
    main()
