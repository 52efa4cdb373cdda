"""tfrl's PPO against Stable-Baselines3's (and SBX's, and, given its script, CleanRL's), side by side on this
machine: env steps/s of a rollout (collecting it and its whole update), the median of the rollouts
after the first of each run. MuJoCo tasks run CleanRL's MuJoCo recipe on every side (1 env x 2048
steps, 10 epochs of 32 minibatches, 64-64 tanh networks, observation and reward normalization);
Atari games CleanRL's Atari recipe (8 envs x 128 steps, 4 epochs of 4 minibatches, the Nature CNN
shared by policy and value, the baselines' wrappers; conf/tuned/ppo_atari.yaml). SB3's side is
benchmarks/sb3_ppo_throughput.py. The sides run alternately, `--rounds` times each, so that a busy
spell hits all of them; the table gives the medians of the rounds and the ratios to tfrl.

    bash benchmarks/setup_sb3.sh        # once
    uv run python benchmarks/compare_ppo.py --env hopper --rounds 3 [--out labs/records/ppo_sb3_hopper.json]
    uv run python benchmarks/compare_ppo.py --env pong --rounds 3 --cleanrl /path/to/ppo_atari.py
    uv run python benchmarks/compare_ppo.py --env hopper --rounds 3 --sbx --cleanrl /path/to/ppo_continuous_action.py

`--cleanrl` takes a CleanRL script (ppo_continuous_action.py or ppo_atari.py) made to run in SB3's venv
and to print one JSON line {"steps_per_second": ...} per iteration: labs/ppo_atari_speed/patch_cleanrl.py
writes such a copy from a CleanRL checkout.
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
SBX_PYTHON = os.path.join(ROOT, "benchmarks", ".venv-sbx", "bin", "python")
MUJOCO = {"hopper": "Hopper-v5", "halfcheetah": "HalfCheetah-v5", "walker2d": "Walker2d-v5", "ant": "Ant-v5",
          "inverted_pendulum": "InvertedPendulum-v5"}
ATARI = {"pong": "Pong", "breakout": "Breakout"}  # tfrl's env.game; SB3 and CleanRL take <game>NoFrameskip-v4


def batch_of(env: str, n_steps: int) -> int:
    return 8 * 128 if env in ATARI else n_steps


def tfrl_rate(env: str, rollouts: int, n_steps: int) -> float:
    task = ["env=atari", f"env.game={ATARI[env]}"] if env in ATARI else [f"env={env}", f"agent.n_steps={n_steps}"]
    with tempfile.TemporaryDirectory() as run_dir:
        cmd = [sys.executable, "train.py", "agent=ppo", *task, f"hydra.run.dir={run_dir}",
               f"total_steps={batch_of(env, n_steps) * (rollouts + 1)}", "eval_every=100000000", "eval_episodes=1",
               "env.eval_max_episode_steps=10", "checkpoint.every=0", "logger.progress=false", "logger.tensorboard=false"]
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=3600)
        if proc.returncode:
            sys.exit(f"error: tfrl's run failed:\n{proc.stderr[-3000:]}")
        with open(os.path.join(run_dir, "update.csv")) as f:
            rates = [float(r["steps_per_second"]) for r in csv.DictReader(f)][1:]
    return statistics.median(rates)


def env_id(env: str) -> str:
    return f"{ATARI[env]}NoFrameskip-v4" if env in ATARI else MUJOCO[env]


def sb3_rate(env: str, rollouts: int, n_steps: int, sbx: bool = False) -> float:
    """SB3's PPO, or with `sbx` SBX's (its own venv)."""
    cmd = [SBX_PYTHON if sbx else SB3_PYTHON, "benchmarks/sb3_ppo_throughput.py", env_id(env), "--rollouts",
           str(rollouts), "--n-steps", str(n_steps), *(["--atari"] if env in ATARI else []), *(["--sbx"] if sbx else [])]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=3600)
    if proc.returncode:
        sys.exit(f"error: {'SBX' if sbx else 'SB3'}'s run failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])["steps_per_second"]


def cleanrl_rate(script: str, env: str, rollouts: int, n_steps: int) -> float:
    """CleanRL's own defaults are the recipe; only the length (and MuJoCo's rollout) is set."""
    length = ["--num-steps", str(n_steps)] if env not in ATARI else []
    cmd = [SB3_PYTHON, os.path.basename(script), "--env-id", env_id(env), "--total-timesteps",
           str(batch_of(env, n_steps) * (rollouts + 1)), "--no-cuda", *length]
    proc = subprocess.run(cmd, cwd=os.path.dirname(os.path.abspath(script)), capture_output=True, text=True,
                          timeout=3600)
    if proc.returncode:
        sys.exit(f"error: CleanRL's run failed:\n{proc.stderr[-3000:]}")
    rates = [json.loads(line)["steps_per_second"] for line in proc.stdout.splitlines() if line.startswith("{")]
    if len(rates) < 2:
        sys.exit(f"error: {script} printed no per-iteration steps_per_second lines; make it with "
                 f"labs/ppo_atari_speed/patch_cleanrl.py")
    return statistics.median(rates[1:])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--env", default="hopper", choices=sorted({**MUJOCO, **ATARI}))
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--rollouts", type=int, default=5, help="timed rollouts per run, after a first one")
    p.add_argument("--n-steps", type=int, default=2048, help="MuJoCo's rollout per env (Atari's is 128)")
    p.add_argument("--cleanrl", help="a CleanRL script patched to print its rate (see above); left out if not given")
    p.add_argument("--sbx", action="store_true", help="SBX's PPO too (MuJoCo; its venv: bash benchmarks/setup_sbx.sh)")
    p.add_argument("--out", help="write the record here (JSON)")
    a = p.parse_args()
    if not os.path.exists(SB3_PYTHON):
        sys.exit(f"error: {SB3_PYTHON} does not exist; make SB3's venv first: bash benchmarks/setup_sb3.sh")
    if a.sbx and (a.env in ATARI or not os.path.exists(SBX_PYTHON)):
        sys.exit("error: --sbx times SBX's PPO on MuJoCo tasks, in its venv (bash benchmarks/setup_sbx.sh)")
    sides = {"tfrl": lambda: tfrl_rate(a.env, a.rollouts, a.n_steps), "sb3": lambda: sb3_rate(a.env, a.rollouts, a.n_steps)}
    if a.sbx:
        sides["sbx"] = lambda: sb3_rate(a.env, a.rollouts, a.n_steps, sbx=True)
    if a.cleanrl:
        sides["cleanrl"] = lambda: cleanrl_rate(a.cleanrl, a.env, a.rollouts, a.n_steps)
    rounds = []
    for r in range(a.rounds):
        rounds.append({name: side() for name, side in sides.items()})
        print(f"round {r + 1}: " + ", ".join(f"{k} {v:.0f}" for k, v in rounds[-1].items()) + " env steps/s", flush=True)
    medians = {k: statistics.median(x[k] for x in rounds) for k in sides}
    print(f"| {a.env} | " + " | ".join(f"{k} {v:.0f}" for k, v in medians.items()) + " | "
          + ", ".join(f"{medians['tfrl'] / v:.2f}x {k}" for k, v in medians.items() if k != "tfrl") + " |")
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"env": a.env, "rounds": rounds, **medians,
                       "ratios": {k: medians["tfrl"] / v for k, v in medians.items() if k != "tfrl"},
                       "command": " ".join(sys.argv)}, f, indent=1)


if __name__ == "__main__":
    main()
