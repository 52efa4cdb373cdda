"""How long a run takes to stop after SIGTERM (or SIGUSR2, SLURM's time-limit warning), for each
agent at its preset settings: the time a cluster's scheduler must wait before it kills a job with no
checkpoint (SLURM's KillWait is 30 s by default).

    uv run python benchmarks/stop_latency.py [--agents td3 sac crossq td7 mrq dqn ga] [--rounds 3] [--into 3]

Each case starts `train.py agent=<agent> env=<env>` (Hopper for the continuous agents, CartPole for
DQN and the GA) with its preset network, buffer and update cadence, and learning_starts=1000 so that
it learns within seconds, its logging and call lengths as preset; waits until the first call with
updates has returned (an episode past learning_starts in train.csv; a GA's first generation), then
`--into` seconds more, when it is inside a call that
drives env steps from the compiled graph or inside an update phase; sends the signal; and times
until the process has exited, its checkpoint written. Agents alternate within each round; the
table gives the medians and every round.
`--tree ../base` runs another checkout's train.py (a worktree of the commit before a change).
Writes labs/records/stop_latency.json (or `--out`).
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LEARNING_STARTS = 1000
ENVS = {"td3": "hopper", "ddpg": "hopper", "sac": "hopper", "crossq": "hopper", "td7": "hopper", "mrq": "hopper",
        "dqn": "cartpole", "ga": "cartpole"}


def learning(run_dir: str, agent: str) -> bool:
    """Whether the first call with updates has returned (it traces the update): an episode logged
    past learning_starts in train.csv (the loop logs them between calls), or a GA's generation."""
    path = os.path.join(run_dir, "train.csv")
    if not os.path.exists(path):
        return False
    with open(path) as f:
        return any(agent == "ga" or int(row["step"]) > LEARNING_STARTS for row in csv.DictReader(f))


def one(agent: str, into: float, sig: int, timeout: float, tree: str) -> dict:
    """Seconds from the signal to the process's exit, and the step the run stopped at."""
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = os.path.join(tmp, "run")
        cmd = [sys.executable, "train.py", f"agent={agent}", f"env={ENVS[agent]}", "total_steps=10000000",
               f"learning_starts={LEARNING_STARTS}", "eval_every=10000000", "eval_episodes=1",
               "checkpoint.every=0", "logger.progress=false", "logger.tensorboard=false", f"hydra.run.dir={run_dir}"]
        proc = subprocess.Popen(cmd, cwd=tree, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        start = time.perf_counter()
        while not learning(run_dir, agent):
            if proc.poll() is not None or time.perf_counter() - start > timeout:
                proc.kill()
                sys.exit(f"error: {agent} logged no update within {timeout:.0f} s:\n{proc.stdout.read()[-3000:]}")
            time.sleep(0.2)
        time.sleep(into)
        sent = time.perf_counter()
        proc.send_signal(sig)
        out, _ = proc.communicate(timeout=600)
        waited = time.perf_counter() - sent
        stopped = [line for line in out.splitlines() if line.startswith("stopped by")]
        if proc.returncode != 128 + sig or not stopped:
            sys.exit(f"error: {agent} exited {proc.returncode} after the signal, not {128 + sig}:\n{out[-3000:]}")
        return {"seconds": waited, "step": int(stopped[0].split(" at step ")[1].split(";")[0])}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--agents", nargs="+", default=["td3", "sac", "crossq", "td7", "mrq", "dqn", "ga"], choices=sorted(ENVS))
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--into", type=float, default=3.0, help="seconds of learning before the signal")
    p.add_argument("--signal", default="SIGTERM", choices=["SIGTERM", "SIGUSR2", "SIGINT"])
    p.add_argument("--timeout", type=float, default=600.0, help="seconds to wait for the first update record")
    p.add_argument("--tree", default=ROOT, help="the checkout whose train.py runs (a worktree of an older commit)")
    p.add_argument("--out", default=os.path.join(ROOT, "labs", "records", "stop_latency.json"))
    a = p.parse_args()
    sig = getattr(signal, a.signal)
    results: dict[str, list[dict]] = {agent: [] for agent in a.agents}
    for r in range(a.rounds):
        for agent in a.agents:
            results[agent].append(one(agent, a.into, sig, a.timeout, a.tree))
            print(f"round {r + 1} {agent}: stopped {results[agent][-1]['seconds']:.1f} s after {a.signal}, "
                  f"at step {results[agent][-1]['step']}", flush=True)
    print(f"\n| agent (env) | seconds from {a.signal} to exit, median | rounds |\n|---|---|---|")
    report = {}
    for agent, rows in results.items():
        secs = [row["seconds"] for row in rows]
        report[agent] = {"env": ENVS[agent], "median_seconds": statistics.median(secs), "rounds": rows}
        print(f"| {agent} ({ENVS[agent]}) | {statistics.median(secs):.1f} | {', '.join(f'{s:.1f}' for s in secs)} |")
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump({"signal": a.signal, "into": a.into, "tree": os.path.abspath(a.tree), "agents": report}, f, indent=2)
    print(f"written: {a.out}")


if __name__ == "__main__":
    main()
