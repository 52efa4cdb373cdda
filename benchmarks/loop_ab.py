"""Whole-loop env steps/s of several variants of one run, measured in one process, alternating, so
that the machine's drift hits every variant alike. Each variant is a string of overrides on top of
the common ones; all variants share TF's thread settings (they are fixed per process).

    uv run python benchmarks/loop_ab.py agent=td3 env=ant --variants "" "speed.steps_per_call=0"
    uv run python benchmarks/loop_ab.py agent=dqn env=cartpole network.hidden=[64,64] batch_size=64 \\
        updates_per_step=1 train_every=1 buffer.capacity=1000000 --variants "" "speed.steps_per_call=0"

Each round trains every variant for `--warmup` random steps then `--intervals` + 1 intervals of
`--steps` env steps (the first one, with the tracing, is not timed); a variant's figure is the
median over rounds of its median interval. Prints a table and writes JSON (`--output`).
"""
from __future__ import annotations

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from training.runtime import prepare_process  # noqa: E402

prepare_process()  # before TensorFlow or Keras is imported anywhere

import argparse  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("overrides", nargs="*", help="common overrides, as for train.py")
    p.add_argument("--variants", nargs="+", required=True, help='one string of overrides per variant ("" = as is)')
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=1000, help="env steps per timed interval")
    p.add_argument("--intervals", type=int, default=3)
    p.add_argument("--warmup", type=int, default=1000)
    p.add_argument("--output", default=None)
    a = p.parse_args()

    from benchmarks.throughput import _PartTimer, _Records, interval_rate, timed_intervals, timed_settings
    from training.builder import build_run
    from training.config import compose_config
    from training.loop import train

    runs = {}
    for variant in a.variants:
        cfg = compose_config([*a.overrides, *variant.split()])
        runs[variant] = (cfg, build_run(cfg))
    rates: dict[str, list[float]] = {v: [] for v in a.variants}
    for r in range(a.rounds):
        for variant, (cfg, run) in runs.items():
            records = _Records(_PartTimer())
            train(run.learner, run.buffer, run.envs, run.eval_env,
                  timed_settings(run.settings, a.warmup, a.steps, a.intervals), records,
                  driver=run.driver)
            rates[variant].append(interval_rate(timed_intervals(records, a.warmup, a.steps, a.intervals)))
            print(f"round {r + 1}: {rates[variant][-1]:8.1f} env steps/s  {variant or '(as is)'}", flush=True)
    for _, run in runs.values():
        run.close()
    base = statistics.median(rates[a.variants[0]])
    print(f"\n{' '.join(a.overrides)}; median of {a.rounds} rounds\n| variant | env steps/s | rounds | vs first |\n|---|---|---|---|")
    for variant, rs in rates.items():
        m = statistics.median(rs)
        print(f"| {variant or '(as is)'} | {m:.1f} | {', '.join(f'{x:.0f}' for x in rs)} | {m / base:.2f}x |")
    if a.output:
        with open(a.output, "w") as f:
            json.dump({"overrides": a.overrides, "rounds": a.rounds, "steps": a.steps,
                       "env_steps_per_s": {v: {"median": statistics.median(rs), "rounds": rs} for v, rs in rates.items()}},
                      f, indent=1)
        print(f"written: {a.output}")


if __name__ == "__main__":
    main()
