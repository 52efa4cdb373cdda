"""What one DeepMind Control step costs: dm_control in this process, through env=dmc's process of its
own (envs/dmc.py), and with pixels (an 84x84 render per agent step, two control steps each).

    uv run python benchmarks/dmc_step.py [--domain cheetah --task run --steps 2000]
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def per_step_ms(step, steps: int) -> float:
    step()  # the first call builds what it builds
    start = time.perf_counter()
    for _ in range(steps):
        step()
    return (time.perf_counter() - start) / steps * 1e3


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--domain", default="cheetah")
    parser.add_argument("--task", default="run")
    parser.add_argument("--steps", type=int, default=2000)
    args = parser.parse_args()
    import gymnasium as gym

    import envs  # noqa: F401 (registers DMC-v1)
    from envs.dmc import suite

    rng = np.random.default_rng(0)
    inner = suite().load(args.domain, args.task, task_kwargs={"random": 0})
    inner.reset()
    shape = inner.action_spec().shape
    rows = {"dm_control, in this process": per_step_ms(lambda: inner.step(rng.uniform(-1, 1, shape)), args.steps)}
    for label, kwargs, steps in (("env=dmc (its own process)", {}, args.steps),
                                 ("env=dmc env.pixels=true (2 control steps, one 84x84 render)", {"pixels": True},
                                  args.steps // 10)):
        env = gym.make("DMC-v1", domain=args.domain, task=args.task, **kwargs)
        env.reset(seed=0)

        def step(env=env):
            if env.step(rng.uniform(-1, 1, shape).astype(np.float32))[3]:
                env.reset()

        rows[label] = per_step_ms(step, steps)
        env.close()
    print(f"{args.domain}-{args.task}, MUJOCO_GL={os.environ.get('MUJOCO_GL', 'egl')}")
    for label, ms in rows.items():
        print(f"  {label}: {ms:.3f} ms per agent step")


if __name__ == "__main__":
    main()
