"""Stable-Baselines3's training loop in env steps/s, with the settings of a tfrl run, for the
side-by-side in benchmarks/compare_sb3.py. Runs in SB3's own venv (benchmarks/setup_sb3.sh), or
with `--impl sbx` SBX's (Stable-Baselines Jax, the same API on JAX; benchmarks/setup_sbx.sh):

    benchmarks/.venv-sb3/bin/python benchmarks/sb3_throughput.py td3 Ant-v5 --hidden 256 256 --batch 256
    benchmarks/.venv-sbx/bin/python benchmarks/sb3_throughput.py td3 Ant-v5 --impl sbx

Prints one JSON line: the median env steps/s over `--repeats` intervals of `--steps` steps, after
`--warmup` random steps (SB3's learning_starts) and one interval that absorbs start-up costs.
With `--update-only`: after filling the buffer the same way, the ms per update of SB3's `train`,
one gradient step per call and `--fuse` per call (each the median of `--repeats` timings).
"""
from __future__ import annotations

import argparse
import json
import statistics
import time

import importlib

import gymnasium as gym
import numpy as np
import torch
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.noise import NormalActionNoise


class StepTimer(BaseCallback):
    """Time at every `every`-th env step."""

    def __init__(self, every: int):
        super().__init__()
        self.every, self.marks = every, []

    def _on_step(self) -> bool:
        if self.num_timesteps % self.every == 0:
            self.marks.append((self.num_timesteps, time.perf_counter()))
        return True


def time_updates(model, a) -> dict:
    """ms per update of `model.train`, one gradient step per call and `a.fuse` per call, on a
    buffer filled by `a.warmup` + `a.steps` steps of learning (the same updates as the loop's)."""
    model.learn(total_timesteps=a.warmup + a.steps)

    def per_update(gradient_steps: int, calls: int) -> float:
        model.train(gradient_steps=gradient_steps, batch_size=a.batch)  # warm
        times = []
        for _ in range(a.repeats):
            t0 = time.perf_counter()
            for _ in range(calls):
                model.train(gradient_steps=gradient_steps, batch_size=a.batch)
            times.append((time.perf_counter() - t0) / (calls * gradient_steps))
        return 1e3 * statistics.median(times)

    return {"update_ms": per_update(1, 50), f"fused_x{a.fuse}_update_ms": per_update(a.fuse, max(1, 50 // a.fuse))}


def versions(impl: str) -> dict:
    if impl == "sbx":
        import jax
        import sbx

        return {"sbx": sbx.__version__, "jax": jax.__version__}
    return {"torch": torch.__version__, "threads": torch.get_num_threads()}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("algo", choices=["td3", "ddpg", "sac", "dqn", "crossq"])
    p.add_argument("env")
    p.add_argument("--hidden", type=int, nargs="+", default=[256, 256])
    p.add_argument("--critic-hidden", type=int, nargs="+", default=None,
                   help="the critics' sizes when they differ from the actor's (net_arch qf; CrossQ)")
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--train-freq", type=int, default=1)
    p.add_argument("--gradient-steps", type=int, default=1)
    p.add_argument("--buffer", type=int, default=1_000_000)
    p.add_argument("--warmup", type=int, default=1000)
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--update-only", action="store_true", help="time SB3's train() alone")
    p.add_argument("--fuse", type=int, default=16, help="gradient steps per train() call (--update-only)")
    p.add_argument("--atari", action="store_true",
                   help="env is an ALE game (BreakoutNoFrameskip-v4): SB3's AtariWrapper, 4 frames stacked, CnnPolicy")
    p.add_argument("--impl", choices=["sb3", "sbx"], default="sb3",
                   help="Stable-Baselines3 (PyTorch) or SBX (JAX): the same classes and arguments")
    a = p.parse_args()
    lib = importlib.import_module("stable_baselines3" if a.impl == "sb3" else "sbx")
    DDPG, DQN, SAC, TD3 = lib.DDPG, lib.DQN, lib.SAC, lib.TD3

    if a.atari:  # as the RL Zoo trains DQN on Atari: make_atari_env's AtariWrapper, then VecFrameStack(4)
        import ale_py
        from stable_baselines3.common.env_util import make_atari_env
        from stable_baselines3.common.vec_env import VecFrameStack

        gym.register_envs(ale_py)
        env = VecFrameStack(make_atari_env(a.env, n_envs=1, seed=a.seed), n_stack=4)
    else:
        env = gym.make(a.env)
    net_arch = list(a.hidden) if a.critic_hidden is None else dict(pi=list(a.hidden), qf=list(a.critic_hidden))
    common = dict(
        policy_kwargs=dict(net_arch=net_arch), batch_size=a.batch, learning_starts=a.warmup,
        train_freq=a.train_freq, gradient_steps=a.gradient_steps, buffer_size=a.buffer, seed=a.seed,
        device="cpu", verbose=0,
    )
    if a.impl == "sbx":
        common.pop("device")  # JAX places itself (the CPU here)
    if a.algo == "dqn" and a.atari:  # the Nature CNN (SB3's NatureCNN, 512 features), its default head
        common["policy_kwargs"] = {}
        model = DQN("CnnPolicy", env, **common)
    elif a.algo == "dqn":
        model = DQN("MlpPolicy", env, **common)
    elif a.algo == "sac":  # SB3's defaults otherwise: learned temperature from 1, target entropy -|A|
        model = SAC("MlpPolicy", env, **common)
    elif a.algo == "crossq":  # sb3-contrib's defaults otherwise: lr 1e-3, Adam beta_1 0.5, policy delay 3
        # sb3-contrib's beside SB3 (the reference of agent=crossq), SBX's own
        CrossQ = importlib.import_module("sb3_contrib").CrossQ if a.impl == "sb3" else lib.CrossQ
        model = CrossQ("MlpPolicy", env, **common)
    else:
        n = env.action_space.shape[0]
        noise = NormalActionNoise(np.zeros(n), 0.1 * np.ones(n))
        model = (TD3 if a.algo == "td3" else DDPG)("MlpPolicy", env, action_noise=noise, **common)
    if a.update_only:
        print(json.dumps({**time_updates(model, a), **versions(a.impl), "settings": vars(a)}))
        return
    timer = StepTimer(a.steps)
    total = a.warmup + a.steps * (a.repeats + 1)
    model.learn(total_timesteps=total, callback=timer)
    marks = [(s, t) for s, t in timer.marks if s >= a.warmup + a.steps]  # skip the first interval
    rates = [(s1 - s0) / (t1 - t0) for (s0, t0), (s1, t1) in zip(marks, marks[1:])]
    print(json.dumps({
        "loop_steps_per_s": statistics.median(rates), "rates": rates, **versions(a.impl), "settings": vars(a),
    }))


if __name__ == "__main__":
    main()
