"""The same seed sweep under joblib, on the one-host SLURM cluster and on the one-host Ray cluster,
with one pre-emption during each cluster sweep: jobs submitted, jobs started again, runs
bit-identical to the joblib sweep's (uninterrupted) runs of the same seed, and wall time.

    bash cluster/slurm.sh up && bash cluster/ray.sh up     # as root; Ray needs uv sync --extra ray
    uv run python benchmarks/cluster_sweeps.py [--seeds 4] [--no-preempt] [--out labs/records/cluster_sweeps.json]

SLURM: once the first job has written a checkpoint, `scontrol requeue` takes it back (SIGTERM: it
checkpoints, SLURM starts it again). Ray: once a job has written a checkpoint, the worker node is
killed with everything on it and `cluster/ray.sh up` starts a new one; Ray retries the tasks that
were running there, which continue from their last periodic checkpoint. Each launcher gets the
host's cores: joblib 2 processes, SLURM and Ray 1 CPU per job on a 2-core machine.
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import re
import signal
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from training.checkpoints import latest_values, list_checkpoints  # noqa: E402
RUN = ["total_steps=6000", "learning_starts=500", "eval_every=2000", "eval_episodes=1", "checkpoint.every=2000",
       "network.hidden=[64,64]", "deterministic=true", "logger.progress=false", "speed.threads.inter_op=1",
       "speed.threads.intra_op=1"]
LAUNCHERS = {
    "joblib": ["hydra/launcher=joblib", f"hydra.launcher.n_jobs={os.cpu_count()}"],
    "slurm": ["hydra/launcher=slurm", "hydra.launcher.partition=main", "hydra.launcher.gpus_per_node=0",
              "hydra.launcher.cpus_per_task=1", "hydra.launcher.mem_gb=2", "hydra.launcher.timeout_min=30"],
    "ray_cluster": ["hydra/launcher=ray_cluster"],
}


def first_checkpoint(sweep: str, proc: subprocess.Popen) -> str:
    """The job dir that wrote the sweep's first periodic checkpoint."""
    while True:
        found = [job for job in sorted(glob.glob(os.path.join(sweep, "*", ""))) if list_checkpoints(job)]
        if found:
            return found[0].rstrip("/")
        if proc.poll() is not None:
            raise RuntimeError(f"the sweep ended before any checkpoint: {proc.communicate()}")
        time.sleep(0.5)


def preempt_slurm(sweep: str, proc: subprocess.Popen, env: dict) -> None:
    job_dir = first_checkpoint(sweep, proc)
    task = os.path.basename(job_dir)
    ids = subprocess.run(["squeue", "-h", "-o", "%i"], env=env, capture_output=True, text=True, check=True).stdout.split()
    (job,) = [i for i in ids if i.endswith(f"_{task}")]
    subprocess.run(["scontrol", "requeue", job], env=env, check=True)


def preempt_ray(sweep: str, proc: subprocess.Popen, env: dict) -> None:
    first_checkpoint(sweep, proc)
    kill_worker_node(os.environ.get("TFRL_RAY_DIR", "/tmp/tfrl-ray"))
    subprocess.run(["bash", os.path.join(ROOT, "cluster", "ray.sh"), "up"], env=env, check=True, capture_output=True)


def kill_worker_node(ray_dir: str) -> None:
    """Kill cluster/ray.sh's worker node 1 with everything on it (its raylet and the processes
    below it: the node's agents and the tasks it runs), as a pre-empted machine dies."""
    with open(os.path.join(ray_dir, "worker-1.pid")) as f:
        raylet = int(f.read())
    for pid in process_tree(raylet):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def process_tree(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(pid))
    tree, todo = [], [root]
    while todo:
        tree.append(pid := todo.pop())
        todo.extend(children.get(pid, []))
    return tree


def restarts(launcher: str, sweep: str, output: str) -> int:
    """Jobs started more than once: SLURM's starts per job in submitit's logs; Ray's resumed runs."""
    if launcher == "slurm":
        starts = [open(p).read().count("Starting with JobEnvironment")
                  for p in glob.glob(os.path.join(sweep, ".submitit", "*", "*_log.out"))]
        return sum(n - 1 for n in starts if n > 1)
    return len(set(re.findall(r"resumed (\S+) from step_", output)))


def sweep(launcher: str, seeds: int, out_dir: str, env: dict, preempt: bool) -> dict:
    path = os.path.join(out_dir, launcher)
    cmd = [sys.executable, "train.py", "-m", f"hydra.sweep.dir={path}", f"seed=range({seeds})", *RUN, *LAUNCHERS[launcher]]
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if preempt and launcher == "slurm":
        preempt_slurm(path, proc, env)
    elif preempt and launcher == "ray_cluster":
        preempt_ray(path, proc, env)
    output, _ = proc.communicate()
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(f"{launcher} sweep failed:\n{output[-3000:]}")
    jobs = sorted(d for d in os.listdir(path) if d.isdigit())
    return {"launcher": launcher, "path": path, "jobs": len(jobs), "restarted": restarts(launcher, path, output),
            "wall_s": wall}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=4)
    parser.add_argument("--no-preempt", action="store_true", help="the cluster sweeps without a pre-emption")
    parser.add_argument("--work", default="/tmp/cluster_sweeps", help="where the sweeps' run dirs go")
    parser.add_argument("--out", default=os.path.join(ROOT, "labs", "records", "cluster_sweeps.json"))
    args = parser.parse_args()
    env = {**os.environ, "SLURM_CONF": os.environ.get("SLURM_CONF", "/tmp/tfrl-slurm/slurm.conf"),
           "RAY_ADDRESS": os.environ.get("RAY_ADDRESS", "127.0.0.1:6390"),
           "RAY_DEDUP_LOGS": "0", "PATH": f"{os.path.dirname(sys.executable)}:{os.environ['PATH']}"}
    subprocess.run(["rm", "-rf", args.work], check=True)
    rows = [sweep(launcher, args.seeds, args.work, env, not args.no_preempt) for launcher in LAUNCHERS]
    reference = {seed: latest_values(os.path.join(rows[0]["path"], str(seed))) for seed in range(args.seeds)}
    import numpy as np

    for row in rows:
        row["identical"] = sum(
            all(np.array_equal(a, reference[seed][k]) for k, a in latest_values(os.path.join(row["path"], str(seed))).items())
            for seed in range(args.seeds))
        row["wall_vs_joblib"] = row["wall_s"] / rows[0]["wall_s"]
    print("| launcher | jobs | started again | identical to joblib's | wall time | vs joblib |")
    print("| --- | --- | --- | --- | --- | --- |")
    for r in rows:
        print(f"| {r['launcher']} | {r['jobs']} | {r['restarted']} | {r['identical']} of {r['jobs']} | "
              f"{r['wall_s']:.0f} s | {r['wall_vs_joblib']:.2f}x |")
    with open(args.out, "w") as f:
        json.dump({"command": " ".join(sys.argv), "seeds": args.seeds, "preempted": not args.no_preempt, "run": RUN,
                   "rows": rows}, f, indent=2)


if __name__ == "__main__":
    main()
