"""tfrl against Stable-Baselines3, side by side on this machine: whole-loop env steps/s with the
same algorithm, env, network, batch and update cadence. The two run alternately, `--rounds` times
each, so that a busy spell on a shared machine hits both; the table gives the medians and the
ratio of medians.

    bash benchmarks/setup_sb3.sh            # once: SB3 + PyTorch (CPU) in benchmarks/.venv-sb3
    bash benchmarks/setup_sbx.sh            # once, for --sbx: SBX + JAX (CPU) in benchmarks/.venv-sbx
    uv run python benchmarks/compare_sb3.py [--rounds 3] [--only td3_ant] [--sbx]
    uv run python benchmarks/compare_sb3.py --updates [--only td3_ant]

With `--sbx`, SBX (Stable-Baselines Jax: SB3's algorithms on JAX) runs each case too, in the same
rotation. Writes labs/records/sb3_comparison.json. With `--updates` it compares the update alone
instead: ms per update including the sampling of its batch, one update per call (tfrl's
`agent.update`, SB3's `train(gradient_steps=1)`) and 16 per call (`learner.update` of 16 stacked batches,
`train(gradient_steps=16)`), on a buffer filled by the warm-up; it writes
labs/records/sb3_update_comparison.json. Since a loop step costs at least its update, the
ratio of the updates bounds what the loop's ratio can reach at one update per step.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
RECORDS = os.path.join(ROOT, "labs", "records")  # the JSON records this script writes
PYTHONS = {"sb3": os.path.join(HERE, ".venv-sb3", "bin", "python"),
           "sbx": os.path.join(HERE, ".venv-sbx", "bin", "python")}
SETUP = {"sb3": "bash benchmarks/setup_sb3.sh", "sbx": "bash benchmarks/setup_sbx.sh"}

# name: (tfrl overrides, SB3 arguments). Same network, batch, buffer and update cadence.
CASES = {
    "td3_ant": (
        ["agent=td3", "env=ant"],
        ["td3", "Ant-v5", "--hidden", "256", "256", "--batch", "256", "--train-freq", "1"],
    ),
    # the same update-to-data ratio, with the updates due every 16 steps done together (SB3:
    # train_freq=16, gradient_steps=16; tfrl fuses the 16 into one compiled call)
    "td3_ant_every16": (
        ["agent=td3", "env=ant", "train_every=16"],
        ["td3", "Ant-v5", "--hidden", "256", "256", "--batch", "256", "--train-freq", "16", "--gradient-steps", "16"],
    ),
    # The opt-in bfloat16 matmuls of the update (`update_precision`), against SB3 in float32: not
    # the same settings, so not a like-for-like ratio; it shows what the opt-in adds to td3_ant.
    "td3_ant_bf16": (
        ["agent=td3", "env=ant", "speed.update_precision=bfloat16"],
        ["td3", "Ant-v5", "--hidden", "256", "256", "--batch", "256", "--train-freq", "1"],
    ),
    "sac_ant": (
        ["agent=sac", "env=ant"],
        ["sac", "Ant-v5", "--hidden", "256", "256", "--batch", "256", "--train-freq", "1"],
    ),
    # CrossQ with sb3-contrib's networks (critics 1024-1024, actor 256-256; SB3 side: sb3-contrib's CrossQ)
    "crossq_ant": (
        ["agent=crossq", "env=ant"],
        ["crossq", "Ant-v5", "--hidden", "256", "256", "--critic-hidden", "1024", "1024", "--batch", "256",
         "--train-freq", "1"],
    ),
    # ... with its update in graph mode instead of speed.compile=auto's XLA (the A/B of that choice)
    "crossq_ant_graph": (
        ["agent=crossq", "env=ant", "speed.compile=graph"],
        ["crossq", "Ant-v5", "--hidden", "256", "256", "--critic-hidden", "1024", "1024", "--batch", "256",
         "--train-freq", "1"],
    ),
    # ... at the paper's width (critics 2048-2048: Bhatt et al.'s setting, run once for its cost)
    "crossq_ant_2048": (
        ["agent=crossq", "env=ant", "network.hidden=[2048,2048]"],
        ["crossq", "Ant-v5", "--hidden", "256", "256", "--critic-hidden", "2048", "2048", "--batch", "256",
         "--train-freq", "1"],
    ),
    # ... and at the width the learning comparisons use (critics 256-256)
    "crossq_ant_256": (
        ["agent=crossq", "env=ant", "network.hidden=[256,256]"],
        ["crossq", "Ant-v5", "--hidden", "256", "256", "--critic-hidden", "256", "256", "--batch", "256",
         "--train-freq", "1"],
    ),
    "dqn_cartpole_every4": (
        ["agent=dqn", "env=cartpole", "network.hidden=[64,64]", "batch_size=64", "updates_per_step=0.25",
         "train_every=4", "buffer.capacity=1000000"],
        ["dqn", "CartPole-v1", "--hidden", "64", "64", "--batch", "64", "--train-freq", "4"],
    ),
    "dqn_cartpole_every1": (
        ["agent=dqn", "env=cartpole", "network.hidden=[64,64]", "batch_size=64", "updates_per_step=1",
         "train_every=1", "buffer.capacity=1000000"],
        ["dqn", "CartPole-v1", "--hidden", "64", "64", "--batch", "64", "--train-freq", "1"],
    ),
    # DQN on Atari with the RL Zoo's settings (conf/tuned/dqn_atari.yaml; SB3: make_atari_env, VecFrameStack 4,
    # CnnPolicy): an update every 4 steps, batch 32, a 100k buffer
    "dqn_breakout": (
        ["agent=dqn", "env=atari", "env.game=Breakout"],
        ["dqn", "BreakoutNoFrameskip-v4", "--atari", "--batch", "32", "--train-freq", "4", "--buffer", "100000"],
    ),
    "dqn_pong": (
        ["agent=dqn", "env=atari", "env.game=Pong"],
        ["dqn", "PongNoFrameskip-v4", "--atari", "--batch", "32", "--train-freq", "4", "--buffer", "100000"],
    ),
}
# The DQN cases again with TF's own inter-op pool: tfrl's default (`speed.threads.inter_op=auto`)
# runs a network this small with one inter-op thread; this shows what that runtime setting is worth.
for _name in ("dqn_cartpole_every4", "dqn_cartpole_every1"):
    CASES[f"{_name}_tfpool"] = (CASES[_name][0] + ["speed.threads.inter_op=null"], CASES[_name][1])
# DQN on Atari with `speed.update_precision=bfloat16`: the convolutions and matmuls of tfrl's update in
# bfloat16 (oneDNN's AMX/AVX512-BF16 kernels where the CPU has them), SB3 in its float32
CASES["dqn_breakout_bf16"] = (CASES["dqn_breakout"][0] + ["speed.update_precision=bfloat16"], CASES["dqn_breakout"][1])


# the cases whose updates differ (the others repeat one of these at another cadence)
UPDATE_CASES = ["td3_ant", "dqn_cartpole_every1", "dqn_cartpole_every1_tfpool"]
FUSE = 16


def run_tfrl(overrides: list[str], steps: int, warmup: int, repeats: int, updates: bool = False):
    """Env steps/s of tfrl's loop, or with `updates` (ms per update with its sampling: one per
    call, FUSE per call)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "r.json")
        what = ["bench.only=update", f"bench.fuse={FUSE}", f"bench.buffer_fill={warmup + steps}"] if updates else [
            "bench.only=loop", f"bench.loop_steps={steps}", f"bench.warmup={warmup}"]
        # the compile mode the run's config asks for: speed=fast's auto (XLA for CrossQ, graph for the rest)
        mode = next((o.split("=", 1)[1] for o in overrides if o.startswith("speed.compile=")), "auto")
        cmd = [sys.executable, os.path.join(HERE, "throughput.py"), *overrides, f"bench.modes=[{mode}]", *what,
               f"bench.repeats={repeats}", f"bench.output={out}"]
        subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True, text=True)
        with open(out) as f:
            r = json.load(f)["results"][mode]
    if not updates:
        return r["loop_steps_per_s"]
    return (r["update_ms"] + r["sample_us"] / 1e3,
            r[f"fused_x{FUSE}_update_ms"] + r[f"sample_x{FUSE}_us"] / 1e3 / FUSE)


def run_sb3(args: list[str], steps: int, warmup: int, repeats: int, updates: bool = False, impl: str = "sb3"):
    """The same for SB3 or SBX (their `train` samples its own batches)."""
    cmd = [PYTHONS[impl], os.path.join(HERE, "sb3_throughput.py"), *args, "--impl", impl, "--steps", str(steps),
           "--warmup", str(warmup), "--repeats", str(repeats)] + (["--update-only", "--fuse", str(FUSE)] if updates else [])
    proc = subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True, text=True)
    r = json.loads(proc.stdout.strip().splitlines()[-1])
    return (r["update_ms"], r[f"fused_x{FUSE}_update_ms"]) if updates else r["loop_steps_per_s"]


def warn_if_busy(threshold: float = 0.5) -> float:
    """Say so when something else is running: the sides' thread pools differ (torch takes every core,
    tfrl's small loops one thread), so a busy core slows them unequally and the ratio is not the code's."""
    load = os.getloadavg()[0]
    if load > threshold:
        print(f"warning: the 1-minute load average is {load:.2f} on {os.cpu_count()} cores, so another process "
              "is running; the two sides share a busy core unequally. Measure with nothing else running.", flush=True)
    return load


def write_report(path: str, report: dict, a) -> None:
    """Write the cases just measured into `path`, keeping the other cases a file already holds
    (so that `--only` reruns one case without dropping the rest); each case keeps its settings."""
    cases = {}
    if os.path.exists(path):
        with open(path) as f:
            cases = json.load(f).get("cases", {})
    for row in report.values():
        row["settings"] = vars(a)
    cases.update(report)
    with open(path, "w") as f:
        json.dump({"cases": cases}, f, indent=2)
    print(f"written: {path}")


def compare_updates(cases: list[str], a) -> None:
    """ms per update side by side, one per call and FUSE per call; ratio SB3 / tfrl."""
    report = {}
    for name in cases:
        ours_args, sb3_args = CASES[name]
        ours, sb3 = [], []
        for r in range(a.rounds):
            ours.append(run_tfrl(ours_args, a.steps, a.warmup, a.repeats, updates=True))
            sb3.append(run_sb3(sb3_args, a.steps, a.warmup, a.repeats, updates=True))
            print(f"{name} round {r + 1}: ms per update, one per call / {FUSE} per call: tfrl {ours[-1][0]:.3f} / "
                  f"{ours[-1][1]:.3f}  sb3 {sb3[-1][0]:.3f} / {sb3[-1][1]:.3f}", flush=True)
        row = {"tfrl": ours, "sb3": sb3, "tfrl_overrides": ours_args, "sb3_args": sb3_args}
        for i, way in enumerate(["one", f"x{FUSE}"]):
            row[f"tfrl_{way}_ms"] = statistics.median(x[i] for x in ours)
            row[f"sb3_{way}_ms"] = statistics.median(x[i] for x in sb3)
            row[f"ratio_{way}"] = row[f"sb3_{way}_ms"] / row[f"tfrl_{way}_ms"]
        report[name] = row
    print(f"\n| case | tfrl ms/update (1 per call, {FUSE} per call) | SB3 ms/update (1, {FUSE}) | SB3 / tfrl (1, {FUSE}) |"
          "\n|---|---|---|---|")
    for name, r in report.items():
        print(f"| {name} | {r['tfrl_one_ms']:.3f}, {r[f'tfrl_x{FUSE}_ms']:.3f} | {r['sb3_one_ms']:.3f}, "
              f"{r[f'sb3_x{FUSE}_ms']:.3f} | {r['ratio_one']:.2f}x, {r[f'ratio_x{FUSE}']:.2f}x |")
    write_report(os.path.join(RECORDS, "sb3_update_comparison.json"), report, a)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=1000, help="env steps per timed interval")
    p.add_argument("--repeats", type=int, default=3, help="timed intervals per run (median)")
    p.add_argument("--warmup", type=int, default=1000)
    p.add_argument("--only", nargs="*", choices=sorted(CASES))
    p.add_argument("--updates", action="store_true", help="compare the update alone, not the loop")
    p.add_argument("--sbx", action="store_true", help="run SBX (JAX) too, in the same rotation (loop only)")
    p.add_argument("--no-sb3", action="store_true", help="leave SB3 out (with --sbx: tfrl against SBX alone)")
    p.add_argument("--output", help="write the loop's cases here instead of into labs/records/sb3_comparison.json "
                                    "(whose cases the README's figure draws)")
    a = p.parse_args()
    peers = ([] if a.no_sb3 else ["sb3"]) + (["sbx"] if a.sbx else [])
    for impl in peers:
        if not os.path.exists(PYTHONS[impl]):
            sys.exit(f"error: no {impl.upper()} environment at {PYTHONS[impl]}; create it with `{SETUP[impl]}`.")
    load = warn_if_busy()
    if a.updates:
        return compare_updates(a.only or UPDATE_CASES, a)

    report = {}
    for name in a.only or CASES:
        ours_args, sb3_args = CASES[name]
        ours, theirs = [], {peer: [] for peer in peers}
        for r in range(a.rounds):
            ours.append(run_tfrl(ours_args, a.steps, a.warmup, a.repeats))
            for peer in peers:
                theirs[peer].append(run_sb3(sb3_args, a.steps, a.warmup, a.repeats, impl=peer))
            print(f"{name} round {r + 1}: tfrl {ours[-1]:.1f}" + "".join(f"  {p} {v[-1]:.1f}" for p, v in theirs.items())
                  + " env steps/s", flush=True)
        report[name] = {"tfrl": ours, "tfrl_median": statistics.median(ours), "tfrl_overrides": ours_args,
                        "sb3_args": sb3_args, "load_1min_at_start": load}
        for peer, values in theirs.items():  # keys as before: sb3, sb3_median, ratio; sbx, sbx_median, ratio_sbx
            report[name].update({peer: values, f"{peer}_median": statistics.median(values),
                                 "ratio" if peer == "sb3" else f"ratio_{peer}": statistics.median(ours) / statistics.median(values)})
    names = {"sb3": "SB3", "sbx": "SBX"}
    print("\n| case | tfrl env steps/s |" + "".join(f" {names[p]} env steps/s | tfrl / {names[p]} |" for p in peers)
          + "\n|---|---|" + "---|---|" * len(peers))
    for name, r in report.items():
        print(f"| {name} | {r['tfrl_median']:.1f} |" + "".join(
            f" {r[f'{p}_median']:.1f} | {r['ratio' if p == 'sb3' else f'ratio_{p}']:.2f}x |" for p in peers))
    write_report(a.output or os.path.join(RECORDS, "sb3_comparison.json"), report, a)


if __name__ == "__main__":
    main()
