"""Check that tfrl's n-step replay builds the same targets as Stable-Baselines3's NStepReplayBuffer.

    bash benchmarks/setup_sb3.sh                                # once
    benchmarks/.venv-sb3/bin/python benchmarks/sb3_nstep_check.py

Both buffers receive the same stream of CartPole-v1 transitions, cut by a short time limit so
that episodes end both ways (terminated when the pole falls, truncated at the limit), and more
transitions than they hold, so that they wrap. For every stored transition and n in 1..5 it
compares what each buffer hands the update: the n-step reward, the observation to bootstrap from
and the discount of that bootstrap (SB3: `(1 - dones) * discounts`; tfrl: `discount`). It prints
the largest differences and exits 1 if any exceeds float32 rounding. This is what lets
`benchmarks/sb3_learning.py` hand `buffer.n_step` to SB3 as `n_steps`.

It needs SB3, so it runs in SB3's venv (benchmarks/setup_sb3.sh), not in the project's tests;
tfrl's buffer is plain numpy and is imported from the repo.
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import gymnasium as gym
import numpy as np
from stable_baselines3.common.buffers import NStepReplayBuffer, ReplayBuffer

from buffers.uniform import UniformReplay

GAMMA = 0.97
CAPACITY = 600
STEPS = 1500  # > CAPACITY: both buffers wrap
TOLERANCE = 1e-5


def fill(env: gym.Env, buffers: list, seed: int) -> tuple[int, int]:
    """Add the same random-action transitions to every buffer; (terminations, truncations)."""
    rng = np.random.default_rng(seed)
    obs, _ = env.reset(seed=seed)
    ends = [0, 0]
    for _ in range(STEPS):
        action = int(rng.integers(env.action_space.n))
        next_obs, reward, terminated, truncated, _ = env.step(action)
        for buf in buffers:
            if isinstance(buf, UniformReplay):
                buf.add(obs[None], np.array([[action]]), np.array([reward]), next_obs[None], np.array([terminated]),
                        np.array([truncated]))
            else:
                buf.add(obs[None], next_obs[None], np.array([[action]]), np.array([reward]),
                        np.array([terminated or truncated]), [{"TimeLimit.truncated": truncated and not terminated}])
        ends[0] += terminated
        ends[1] += truncated and not terminated
        obs = next_obs
        if terminated or truncated:
            obs, _ = env.reset()
    return ends[0], ends[1]


def compare(n: int, seed: int = 0) -> dict:
    env = gym.wrappers.TimeLimit(gym.make("CartPole-v1").unwrapped, max_episode_steps=15)
    ours = UniformReplay(CAPACITY, 4, 1, GAMMA, np.random.default_rng(seed), discrete_actions=True, n_step=n)
    cls, extra = (NStepReplayBuffer, {"n_steps": n, "gamma": GAMMA}) if n > 1 else (ReplayBuffer, {})
    sb3 = cls(CAPACITY, env.observation_space, env.action_space, device="cpu", n_envs=1, **extra)
    terminations, truncations = fill(env, [ours, sb3], seed)
    idx = np.arange(CAPACITY)
    mine = ours._batch(idx, np.ones(CAPACITY, dtype=np.float32))
    theirs = sb3._get_samples(idx)
    if n == 1:  # the plain buffer's rewards are one step's, its bootstrap discount gamma
        discount = GAMMA * (1.0 - theirs.dones.numpy()[:, 0])
    else:
        discount = (1.0 - theirs.dones.numpy()[:, 0]) * theirs.discounts.numpy()[:, 0]
    return {
        "n": n, "terminations": terminations, "truncations": truncations,
        "reward": float(np.max(np.abs(mine.reward - theirs.rewards.numpy()[:, 0]))),
        "next_obs": float(np.max(np.abs(mine.next_obs - theirs.next_observations.numpy()))),
        "discount": float(np.max(np.abs(mine.discount - discount))),
        "obs": float(np.max(np.abs(mine.obs - theirs.observations.numpy()))),
    }


def main() -> int:
    worst = 0.0
    print(f"{CAPACITY} stored transitions of {STEPS}, gamma {GAMMA}; largest |tfrl - SB3| per field")
    print("n  terminated truncated  reward    next_obs  discount  obs")
    for n in range(1, 6):
        r = compare(n)
        worst = max(worst, r["reward"], r["next_obs"], r["discount"], r["obs"])
        print(f"{n}  {r['terminations']:10d} {r['truncations']:9d}  {r['reward']:.2e}  {r['next_obs']:.2e}  "
              f"{r['discount']:.2e}  {r['obs']:.2e}")
    if worst > TOLERANCE:
        print(f"FAILED: tfrl's and SB3's targets differ by up to {worst:.3g}")
        return 1
    print(f"same targets (all differences <= {TOLERANCE:g})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
