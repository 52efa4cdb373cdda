"""Stable-Baselines3's PPO loop in env steps/s per rollout (collect + update), with CleanRL's MuJoCo
recipe as tfrl's `agent=ppo` runs it, or with `--atari` CleanRL's Atari recipe (ppo_atari.py: 8 envs
x 128 steps, 4 epochs of 4 minibatches, SB3's AtariWrapper and 4 frames stacked, the Nature CNN shared
by policy and value), for the side-by-side in benchmarks/compare_ppo.py; with `--sbx`, SBX's PPO (Stable-Baselines Jax, the same
API on JAX), MuJoCo only. Runs in SB3's venv (benchmarks/setup_sb3.sh), or SBX's (setup_sbx.sh) for --sbx:

    benchmarks/.venv-sb3/bin/python benchmarks/sb3_ppo_throughput.py Hopper-v5 --rollouts 6
    benchmarks/.venv-sb3/bin/python benchmarks/sb3_ppo_throughput.py PongNoFrameskip-v4 --atari --rollouts 6
    benchmarks/.venv-sbx/bin/python benchmarks/sb3_ppo_throughput.py Hopper-v5 --rollouts 6 --sbx

SB3 differs from CleanRL in three details the timing does not depend on (value clipping, the
annealed rate, the value loss's scale); everything that costs time is the same: 64-64 tanh actor and
critic, n_steps x n_envs samples, n_epochs of minibatches, VecNormalize's observation and reward
statistics. Prints one JSON line: the median env steps/s of the rollouts after the first.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time

import gymnasium as gym
import torch
from stable_baselines3 import PPO
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize


class RolloutTimer(BaseCallback):
    def __init__(self):
        super().__init__()
        self.marks = []

    def _on_rollout_start(self) -> None:  # the previous rollout's update has just ended
        self.marks.append((self.num_timesteps, time.perf_counter()))

    def _on_step(self) -> bool:
        return True


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("env_id")
    p.add_argument("--n-envs", type=int, default=1)
    p.add_argument("--n-steps", type=int, default=2048)
    p.add_argument("--minibatches", type=int, default=32)
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--rollouts", type=int, default=6)
    p.add_argument("--normalize", type=int, default=1, help="VecNormalize observations and rewards (CleanRL's MuJoCo)")
    p.add_argument("--atari", action="store_true", help="CleanRL's Atari recipe; the defaults above become its")
    p.add_argument("--sbx", action="store_true", help="SBX's PPO (JAX) in place of SB3's; MuJoCo only")
    a = p.parse_args()
    if a.atari:
        if a.sbx:
            raise SystemExit("error: --sbx times MuJoCo tasks only")
        model = atari_model(a)
    elif a.sbx:
        model = sbx_model(a)
    else:
        envs = DummyVecEnv([lambda: gym.make(a.env_id)] * a.n_envs)
        if a.normalize:
            envs = VecNormalize(envs, norm_obs=True, norm_reward=True, clip_obs=10.0, clip_reward=10.0, gamma=0.99)
        model = PPO("MlpPolicy", envs, n_steps=a.n_steps, batch_size=a.n_steps * a.n_envs // a.minibatches,
                    n_epochs=a.epochs, learning_rate=3e-4, gae_lambda=0.95, clip_range=0.2, ent_coef=0.0, vf_coef=0.5,
                    max_grad_norm=0.5, policy_kwargs=dict(net_arch=dict(pi=[64, 64], vf=[64, 64]),
                                                          activation_fn=torch.nn.Tanh), device="cpu", seed=0)
    batch = model.n_steps * model.n_envs
    timer = RolloutTimer()
    model.learn(total_timesteps=batch * (a.rollouts + 1), callback=timer)
    marks = timer.marks + [(model.num_timesteps, time.perf_counter())]
    rates = [(s1 - s0) / (t1 - t0) for (s0, t0), (s1, t1) in zip(marks[1:], marks[2:])]  # after the first rollout
    print(json.dumps({"impl": "sbx" if a.sbx else "sb3", "env": a.env_id, "steps_per_second": statistics.median(rates), "rollouts": rates,
                      "torch_threads": torch.get_num_threads()}))


def sbx_model(a):
    """SBX's PPO with the same recipe: flax's tanh, separate 64-64 pi and vf networks, orthogonal init
    (SBX's default is off)."""
    import flax.linen as nn
    from sbx import PPO as SBXPPO

    envs = DummyVecEnv([lambda: gym.make(a.env_id)] * a.n_envs)
    if a.normalize:
        envs = VecNormalize(envs, norm_obs=True, norm_reward=True, clip_obs=10.0, clip_reward=10.0, gamma=0.99)
    return SBXPPO("MlpPolicy", envs, n_steps=a.n_steps, batch_size=a.n_steps * a.n_envs // a.minibatches,
                  n_epochs=a.epochs, learning_rate=3e-4, gae_lambda=0.95, clip_range=0.2, ent_coef=0.0, vf_coef=0.5,
                  max_grad_norm=0.5,
                  policy_kwargs=dict(net_arch=dict(pi=[64, 64], vf=[64, 64]), activation_fn=nn.tanh, ortho_init=True),
                  seed=0)


def atari_model(a) -> PPO:
    import ale_py
    from stable_baselines3.common.env_util import make_atari_env
    from stable_baselines3.common.vec_env import VecFrameStack

    gym.register_envs(ale_py)
    a.n_envs, a.n_steps, a.epochs, a.minibatches = 8, 128, 4, 4
    envs = VecFrameStack(make_atari_env(a.env_id, n_envs=a.n_envs, seed=0), n_stack=4)
    return PPO("CnnPolicy", envs, n_steps=a.n_steps, batch_size=a.n_steps * a.n_envs // a.minibatches,
               n_epochs=a.epochs, learning_rate=2.5e-4, gae_lambda=0.95, clip_range=0.1, ent_coef=0.01, vf_coef=0.5,
               max_grad_norm=0.5, device="cpu", seed=0)


if __name__ == "__main__":
    main()
