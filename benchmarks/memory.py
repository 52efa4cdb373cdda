"""Resident memory of a training run as train.py runs it, and of resuming that run.

    uv run python benchmarks/memory.py agent=td3 env=ant total_steps=60000
    uv run python benchmarks/memory.py agent=td3 env=ant total_steps=300000 learning_starts=299000 \\
        --resume-steps 1000 --output labs/records/memory_td3_ant_resume.json
    uv run python benchmarks/memory.py agent=td3 env=ant total_steps=60000 learning_starts=10000 --sb3

Runs `train.py <overrides>` in a child process with a run directory of its own (a temporary one
unless `--run-dir`) and samples, every `--interval` seconds, the resident memory of that process
and its children (async envs) from /proc (Linux), each page counted as its proportional share
(PSS) so pages a child shares with its parent count once: anonymous memory (the heap: the replay
buffer, tensors, Python objects) and file-backed memory (mapped libraries and files) apart, with the env
step the run has reached (the last row of its CSV records). The exact peak of the training process
is its `ru_maxrss` from the kernel, read when it exits (which counts the launching process's memory
at the fork too, so this one stays small: it computes the run's layout in a child of its own); the
sampled peaks can miss a spike shorter than the interval.

The replay buffer is preallocated with `np.zeros`, so its pages become resident as rows are
written: at step s it holds min(s, capacity) rows of known width. `non-buffer` is anonymous
memory minus those rows: TensorFlow, the networks, Python. It is reported at a quarter, half,
three quarters and the end of the steps after learning starts: memory that grows with the steps
without being replay data, which a leak would show as a rise at every quarter (a one-off rise, such
as the first checkpoint's write buffers, shows once).
With `--resume-steps N` the finished run is then resumed (`resume=<run dir> total_steps=+N`) and
sampled the same way: a resume reads the latest checkpoint, replay buffer included, so its peak
against the run's own shows what restoring holds on top of the run's memory. With `--sb3` the same
overrides are then trained by Stable-Baselines3 (`sb3_learning.py` in the venv of `setup_sb3.sh`)
and sampled the same way, for its peaks beside tfrl's (its replay rows have another layout, so the
rows-based figures are tfrl's only).
Prints a table and writes JSON (`--output`).

With `--replay N` it measures replay alone instead: a buffer of N Atari transitions (84x84, stacks of
4) filled in a process of its own (`replay_fill.py`), this project's (each frame stored once) beside
SB3's ReplayBuffer as SB3's DQN builds it (obs and next_obs stacked, in SB3's venv; at
`--sb3-transitions`, since 1M of them are 56 GB), against the floor of one 84x84 frame a transition:

    uv run python benchmarks/memory.py --replay 1000000 --sb3-transitions 100000 \
        --output labs/records/memory_atari_replay.json
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
SB3_PYTHON = os.path.join(ROOT, "benchmarks", ".venv-sb3", "bin", "python")

MB = 1024 * 1024


def _memory_kb(pid: int) -> dict[str, int]:
    """Anonymous, file-backed and shared-memory pages of one process in kB, each page counted as
    its proportional share (PSS, /proc/<pid>/smaps_rollup): a page mapped by n processes counts 1/n
    in each, so a tree's sum is its memory. Plain RSS would count a page shared with a forked child
    twice, and a child between fork and exec shares all of its parent's. Falls back to RSS
    (/proc/<pid>/status) where the kernel has no smaps_rollup; empty once the process has gone."""
    for name, keys in (("smaps_rollup", ("Pss_Anon", "Pss_File", "Pss_Shmem")),
                       ("status", ("RssAnon", "RssFile", "RssShmem"))):
        out = {}
        try:
            with open(f"/proc/{pid}/{name}") as f:
                for line in f:
                    key, _, value = line.partition(":")
                    if key in keys:
                        out[key.removeprefix("Pss_").removeprefix("Rss")] = int(value.split()[0])
        except OSError:  # no such file on an old kernel, or the process has gone
            continue
        if len(out) == 3:
            return out
    return {}


def process_tree(pid: int) -> list[int]:
    """`pid` and every process descended from it (by the parent ids in /proc/<pid>/stat)."""
    parents: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])  # the command may hold spaces and parentheses
        parents.setdefault(ppid, []).append(int(name))
    tree, todo = [], [pid]
    while todo:
        p = todo.pop()
        tree.append(p)
        todo.extend(parents.get(p, []))
    return tree


def tree_memory(pid: int) -> dict[str, float]:
    """Resident memory of `pid` and its descendants in MB (proportional shares, `_memory_kb`):
    anon, file (+ shared memory), total."""
    anon = file = 0
    for p in process_tree(pid):
        s = _memory_kb(p)
        anon += s.get("Anon", 0)
        file += s.get("File", 0) + s.get("Shmem", 0)
    return {"anon_mb": anon / 1024, "file_mb": file / 1024, "total_mb": (anon + file) / 1024}


def last_step(run_dir: str) -> int | None:
    """The newest env step recorded in the run's CSVs (`step` is every record's first column)."""
    best = None
    for kind in ("train", "update", "eval"):
        path = os.path.join(run_dir, f"{kind}.csv")
        try:
            with open(path, "rb") as f:
                f.seek(max(0, os.path.getsize(path) - 4096))
                lines = f.read().decode(errors="replace").splitlines()
        except OSError:
            continue
        for line in reversed(lines[1:] if len(lines) > 1 else lines):
            head = line.split(",", 1)[0]
            if head.isdigit():
                best = max(best or 0, int(head))
                break
    return best


def value_at(points: list[tuple[int, float]], steps: list[float]) -> list[float | None]:
    """For each of `steps`, the value of the last point (step, value) at or before it (the points
    in step order); None before the first point."""
    out = []
    for target in steps:
        before = [v for x, v in points if x <= target]
        out.append(before[-1] if before else None)
    return out


def run_sampled(cmd: list[str], run_dir: str, interval: float, log_path: str) -> dict:
    """Run `cmd`, sampling its process tree's memory and the run's step until it exits."""
    samples = []
    t0 = time.perf_counter()
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
        while True:
            done, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if done:
                break
            mem = tree_memory(proc.pid)
            if mem["total_mb"] > 0:
                samples.append({"t": time.perf_counter() - t0, "step": last_step(run_dir), **mem})
            time.sleep(interval)
    return {"exit_code": os.waitstatus_to_exitcode(status), "seconds": time.perf_counter() - t0,
            "maxrss_mb": usage.ru_maxrss / 1024, "samples": samples}


def buffer_layout(overrides: list[str], sb3: bool = False) -> dict:
    """Capacity, bytes per row and run length of the composed run, from the buffer train.py would
    build (preallocated by np.zeros, so nothing is resident). With `sb3`, SettingError first if
    SB3 cannot train the same run, so that nothing runs."""
    import numpy as np
    from envs.factory import make_env
    from training.config import compose_config, frame_stack
    from training.parts import build_buffer

    cfg = compose_config(overrides)
    if sb3:
        from benchmarks.sb3_learning import sb3_settings

        sb3_settings(cfg)
    env = make_env(cfg.env.id, seed=0, max_episode_steps=cfg.env.max_episode_steps, kwargs=cfg.env.kwargs,
                   frame_stack=frame_stack(cfg))
    buffer = build_buffer(cfg, env.observation_space, env.action_space, np.random.default_rng(0))
    env.close()
    return {"capacity": buffer.capacity, "row_bytes": buffer.row_bytes,
            "total_steps": int(cfg.total_steps), "learning_starts": int(cfg.learning_starts)}


def summarize(phase: dict, layout: dict | None) -> dict:
    """Peaks, and the non-buffer memory at the quarters of the learning steps."""
    samples = [s for s in phase["samples"] if s["step"] is not None]

    def rows_mb(sample: dict) -> float:
        return min(sample["step"], layout["capacity"]) * layout["row_bytes"] / MB

    out = {"exit_code": phase["exit_code"], "seconds": round(phase["seconds"], 1),
           "maxrss_mb": round(phase["maxrss_mb"], 1), "samples": len(phase["samples"])}
    if not phase["samples"]:
        return out
    out["peak_anon_mb"] = round(max(s["anon_mb"] for s in phase["samples"]), 1)
    out["peak_total_mb"] = round(max(s["total_mb"] for s in phase["samples"]), 1)
    if samples and layout:
        step = samples[-1]["step"]
        out["end_step"] = step
        out["buffer_mb_at_end"] = round(rows_mb(samples[-1]), 1)
        out["peak_non_buffer_anon_mb"] = round(max(s["anon_mb"] - rows_mb(s) for s in samples), 1)
        start = max(layout["learning_starts"], samples[0]["step"])
        quarters = [start + q * (step - start) / 4 for q in (1, 2, 3, 4)]
        running = samples[: next(i for i, s in enumerate(samples) if s["step"] == step) + 1]  # not the exit
        points = [(s["step"], s["anon_mb"] - rows_mb(s)) for s in running]
        out["non_buffer_anon_mb_at_quarters"] = [None if v is None else round(v, 1) for v in value_at(points, quarters)]
    return out


def replay_memory(transitions: int, sb3_transitions: int, output: str | None) -> None:
    """This project's Atari replay at `transitions` beside SB3's (both SB3 layouts) at `sb3_transitions`."""
    fill = os.path.join(ROOT, "benchmarks", "replay_fill.py")
    sb3_python = SB3_PYTHON if os.path.exists(SB3_PYTHON) else os.path.join(ROOT, "benchmarks", ".venv-sbx", "bin",
                                                                            "python")  # SBX's venv holds SB3 too
    runs = [[sys.executable, fill, "--impl", "tfrl", "--transitions", str(transitions)]]
    if os.path.exists(sb3_python):
        runs += [[sb3_python, fill, "--impl", "sb3", "--transitions", str(sb3_transitions), *flag]
                 for flag in ([], ["--sb3-optimize"])]
    else:
        print(f"no SB3 venv ({SB3_PYTHON}): `bash benchmarks/setup_sb3.sh` to measure SB3's buffer beside it")
    results = []
    for cmd in runs:
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
        if proc.returncode != 0:
            sys.exit(f"{proc.stderr[-2000:]}\n{' '.join(cmd)} failed")
        results.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    print("| buffer | transitions | resident (MiB) | bytes per transition | x the floor (one 84x84 frame each) |")
    print("|---|---|---|---|---|")
    for r in results:
        print(f"| {r['impl']} | {r['transitions']} | {r['buffer_mb']} | {r['bytes_per_transition']} | {r['vs_floor']} |")
    if output:
        os.makedirs(os.path.dirname(os.path.abspath(output)), exist_ok=True)
        with open(output, "w") as f:
            json.dump({"machine": {"cpus": os.cpu_count(), "processor": platform.processor() or platform.machine()},
                       "results": results}, f, indent=1)
        print(f"wrote {output}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("overrides", nargs="*", help="train.py overrides")
    p.add_argument("--resume-steps", type=int, default=0, help="then resume the run for this many more env steps")
    p.add_argument("--interval", type=float, default=0.5, help="seconds between samples")
    p.add_argument("--run-dir", default=None, help="where the run goes (default: a temporary directory, deleted)")
    p.add_argument("--output", default=None, help="JSON file for the results")
    p.add_argument("--sb3", action="store_true", help="then train the same run with Stable-Baselines3 and sample it")
    p.add_argument("--replay", type=int, default=0, help="measure an Atari replay buffer of this many transitions")
    p.add_argument("--sb3-transitions", type=int, default=100_000, help="with --replay: SB3's buffer's size")
    p.add_argument("--layout-only", action="store_true", help=argparse.SUPPRESS)  # the child that reads the config
    a = p.parse_args()
    if a.replay:
        return replay_memory(a.replay, a.sb3_transitions, a.output)
    if a.layout_only:
        from hydra.errors import HydraException
        from omegaconf.errors import OmegaConfBaseException

        from benchmarks.sb3_learning import SettingError
        from training.config import ConfigError

        try:
            print(json.dumps(buffer_layout(a.overrides, sb3=a.sb3)))
        except (HydraException, OmegaConfBaseException, ConfigError) as err:
            sys.exit(str(err))
        except SettingError as err:
            sys.exit(f"--sb3: {err}")
        return
    if not os.path.isdir("/proc/self"):
        sys.exit("memory.py reads /proc, which this system does not have (Linux only).")
    if a.interval <= 0 or a.resume_steps < 0:
        sys.exit(f"--interval must be positive and --resume-steps at least 0 (got {a.interval}, {a.resume_steps}).")

    child = subprocess.run([sys.executable, os.path.abspath(__file__), "--layout-only", *(["--sb3"] if a.sb3 else []),
                            *a.overrides],
                           capture_output=True, text=True)
    if child.returncode != 0:
        sys.exit(f"{child.stderr.strip()}\nmemory.py ran nothing: change the overrides as the message above says.")
    layout = json.loads(child.stdout.splitlines()[-1])
    if a.sb3 and not os.path.exists(SB3_PYTHON):
        sys.exit(f"--sb3 needs SB3's venv at {SB3_PYTHON}; create it with `bash benchmarks/setup_sb3.sh`.")
    tmp = None if a.run_dir else tempfile.mkdtemp(prefix="tfrl-memory-")
    run_dir = a.run_dir or os.path.join(tmp, "run")
    log = os.path.join(tmp or os.path.dirname(os.path.abspath(run_dir)), "memory_train.log")
    train = [sys.executable, os.path.join(ROOT, "train.py"), "logger.progress=false"]
    phases = {}
    try:
        print(f"training: {' '.join(a.overrides) or '(defaults)'} in {run_dir}", flush=True)
        phases["run"] = run_sampled([*train, *a.overrides, f"hydra.run.dir={run_dir}"], run_dir, a.interval, log)
        if phases["run"]["exit_code"] == 0 and a.resume_steps:
            total = layout["total_steps"] + a.resume_steps
            print(f"resuming it to {total} steps", flush=True)
            phases["resume"] = run_sampled([*train, f"resume={run_dir}", f"total_steps={total}"], run_dir, a.interval, log)
        if phases["run"]["exit_code"] == 0 and a.sb3:
            print("training it with Stable-Baselines3", flush=True)
            sb3_dir = f"{run_dir}_sb3"
            phases["sb3"] = run_sampled([SB3_PYTHON, os.path.join(ROOT, "benchmarks", "sb3_learning.py"), *a.overrides,
                                         f"hydra.run.dir={sb3_dir}"], sb3_dir, a.interval, log)
        failed = {k: v["exit_code"] for k, v in phases.items() if v["exit_code"] != 0}
        if failed:
            with open(log, errors="replace") as f:
                tail = f.read()[-3000:]
            name, code = next(iter(failed.items()))
            what = "sb3_learning.py" if name == "sb3" else "train.py"
            sys.exit(f"{tail}\n{what} exited with code {code} in the {name} phase; the end of its output is "
                     f"above, and nothing was measured.")
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)

    results = {name: summarize(phase, None if name == "sb3" else layout) for name, phase in phases.items()}
    rows = [
        ("exact peak, training process (ru_maxrss, MiB)", "maxrss_mb"),
        ("sampled peak, process tree, anon (MiB)", "peak_anon_mb"),
        ("sampled peak, process tree, anon + file (MiB)", "peak_total_mb"),
        ("replay rows at the last sample (MiB)", "buffer_mb_at_end"),
        ("sampled peak, anon minus replay rows (MiB)", "peak_non_buffer_anon_mb"),
        ("the same at 1/4, 1/2, 3/4, all of the learning steps (MiB)", "non_buffer_anon_mb_at_quarters"),
        ("env step at the last sample", "end_step"),
        ("wall time (s)", "seconds"),
    ]
    print(f"\nbuffer: {layout['capacity']} rows x {layout['row_bytes']} bytes "
          f"({layout['capacity'] * layout['row_bytes'] / MB:.0f} MB when full)")
    print("| measure | " + " | ".join(results) + " |")
    print("|---|" + "---|" * len(results))
    for label, key in rows:
        print(f"| {label} | " + " | ".join(str(r.get(key, "")) for r in results.values()) + " |")
    if "resume" in results:
        extra = results["resume"]["maxrss_mb"] - results["run"]["maxrss_mb"]
        print(f"\nresume's exact peak minus the run's: {extra:+.1f} MB")
    if "sb3" in results:
        print(f"SB3's exact peak over tfrl's: {results['sb3']['maxrss_mb'] / results['run']['maxrss_mb']:.2f}x; "
              f"sampled anon peak: {results['sb3']['peak_anon_mb'] / results['run']['peak_anon_mb']:.2f}x")
    if a.output:
        os.makedirs(os.path.dirname(os.path.abspath(a.output)), exist_ok=True)
        with open(a.output, "w") as f:
            json.dump({"overrides": a.overrides, "resume_steps": a.resume_steps, "interval": a.interval,
                       "machine": {"cpus": os.cpu_count(), "processor": platform.processor() or platform.machine()},
                       "buffer": layout, "results": results,
                       "samples": {k: v["samples"] for k, v in phases.items()}}, f, indent=1)
        print(f"wrote {a.output}")


if __name__ == "__main__":
    main()
