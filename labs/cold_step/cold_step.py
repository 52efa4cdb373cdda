"""What an env step costs inside the training loop: back to back, right after an update call, and
right after a sleep as long as an update. Wall and CPU time of the calling thread, medians.

    uv run python labs/cold_step/cold_step.py agent=td3 env=ant     # from the repository's root

Takes train.py's overrides. It shows why a loop's Python parts (env step, acting, buffer) take
longer in the loop than timed alone (`throughput.py`'s `loop_share_*` against its isolated
parts): if they are slower after a sleep as well as after an update, and their CPU time grows with
their wall time, they are not waiting for a core or for TF's threads, and the update's arithmetic
is not what slows them.
"""
from __future__ import annotations

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # labs/cold_step/ -> the root
sys.path.insert(0, ROOT)

from training.runtime import prepare_process  # noqa: E402

prepare_process()  # before TensorFlow or Keras is imported anywhere

import argparse  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("overrides", nargs="*")
    p.add_argument("--steps", type=int, default=300, help="env steps per condition and round")
    p.add_argument("--rounds", type=int, default=3)
    a = p.parse_args()

    from benchmarks.throughput import per_call, random_transitions
    from training.builder import build_run
    from training.config import compose_config

    cfg = compose_config(a.overrides)
    run = build_run(cfg)
    for transition in random_transitions(run.envs, 5000):
        run.buffer.add(*transition)
    agent, envs = run.learner, run.envs
    batch = run.learner.replay.draw(run.buffer, int(cfg.batch_size), 1)
    update_s = per_call(lambda: agent.update(batch), 1, 5)
    obs = envs.reset(seed=0)[0]

    def timed_step(before) -> tuple[float, float]:
        nonlocal obs
        before()
        action = agent.act(obs, explore=True)
        t0, c0 = time.perf_counter(), time.thread_time()
        obs = envs.step(action)[0]
        return time.perf_counter() - t0, time.thread_time() - c0

    conditions = {"back to back": lambda: None, "after an update": lambda: agent.update(batch),
                  f"after a {1e3 * update_s:.1f} ms sleep": lambda: time.sleep(update_s)}
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in conditions}
    for _ in range(a.rounds):  # alternating, so drift hits every condition alike
        for name, before in conditions.items():
            times[name] += [timed_step(before) for _ in range(a.steps)]
    run.close()
    print(f"env step of {cfg.env.id}, median of {a.rounds} x {a.steps}\n| before it | wall (us) | CPU (us) |\n|---|---|---|")
    for name, ts in times.items():
        print(f"| {name} | {1e6 * statistics.median(w for w, _ in ts):.0f} | {1e6 * statistics.median(c for _, c in ts):.0f} |")


if __name__ == "__main__":
    main()
