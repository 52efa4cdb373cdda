"""The off-policy training loop. It drives any agent through the Agent protocol and never knows
which algorithm it is."""
from __future__ import annotations

import time
from dataclasses import dataclass

import gymnasium as gym
import numpy as np
from tqdm.auto import tqdm

from agents.base import Agent
from buffers.types import Buffer
from training.loggers import Logger


@dataclass(frozen=True)
class LoopSettings:
    total_steps: int  # env steps (transitions) over all vector envs
    learning_starts: int  # uniform random actions and no updates before this many steps
    batch_size: int
    updates_per_step: float  # gradient updates per env step; 0.25 = one update every 4 steps
    eval_every: int
    eval_episodes: int
    log_every: int
    seed: int
    progress: bool = True


def evaluate(agent: Agent, env: gym.Env, episodes: int, seed: int) -> dict[str, float]:
    """Deterministic episodes (no exploration noise). The first reset is seeded with `seed`, so
    every evaluation of a run starts from the same initial states."""
    returns, lengths = [], []
    obs, _ = env.reset(seed=seed)
    for _ in range(episodes):
        done, ret, length = False, 0.0, 0
        while not done:
            action = agent.act(obs[None], explore=False)[0]
            obs, reward, terminated, truncated, _ = env.step(action)
            ret += float(reward)
            length += 1
            done = terminated or truncated
        returns.append(ret)
        lengths.append(length)
        obs, _ = env.reset()
    r = np.asarray(returns)
    return {
        "return_mean": float(r.mean()),
        "return_std": float(r.std()),
        "return_min": float(r.min()),
        "return_max": float(r.max()),
        "length_mean": float(np.mean(lengths)),
    }


def _transition_next_obs(next_obs: np.ndarray, infos: dict, done: np.ndarray) -> np.ndarray:
    """With same-step autoreset, a finished env's `next_obs` is already the next episode's first
    observation; the true last observation is in `infos["final_obs"]`."""
    if not done.any():
        return next_obs
    real = next_obs.copy()
    for i in np.flatnonzero(done):
        real[i] = infos["final_obs"][i]
    return real


def train(
    agent: Agent,
    buffer: Buffer,
    envs: gym.vector.VectorEnv,
    eval_env: gym.Env,
    settings: LoopSettings,
    logger: Logger,
) -> dict[str, float]:
    """Run the loop to `settings.total_steps` env steps. Returns a summary of the run."""
    s = settings
    num_envs = envs.num_envs
    obs, _ = envs.reset(seed=s.seed)
    step, updates_due, n_updates = 0, 0.0, 0
    next_eval, next_log = 0, s.log_every
    metrics = None
    best, last_eval = -np.inf, None
    # disable=None: the bar shows on a terminal and stays out of redirected logs
    bar = tqdm(total=s.total_steps, disable=None if s.progress else True, unit="step", dynamic_ncols=True, smoothing=0.05)
    t0 = time.perf_counter()
    t_log, step_log = t0, 0

    def run_eval() -> None:
        nonlocal best, last_eval
        result = evaluate(agent, eval_env, s.eval_episodes, seed=s.seed + 100)
        last_eval = result
        best = max(best, result["return_mean"])
        logger.log("eval", step, result)
        bar.set_postfix(eval_return=f"{result['return_mean']:.1f}")

    while step < s.total_steps:
        if step >= next_eval:
            run_eval()
            next_eval += s.eval_every

        learning = step >= s.learning_starts  # as sfujim/TD3: t >= start_timesteps
        action = agent.act(obs, explore=True) if learning else envs.action_space.sample()
        next_obs, reward, terminated, truncated, infos = envs.step(action)
        done = terminated | truncated
        buffer.add(obs, action, reward, _transition_next_obs(next_obs, infos, done), terminated, truncated)
        obs = next_obs
        step += num_envs
        bar.update(num_envs)

        if "episode" in infos:
            for i in np.flatnonzero(infos["_episode"]):
                logger.log(
                    "train",
                    step,
                    {"episode_return": float(infos["episode"]["r"][i]), "episode_length": int(infos["episode"]["l"][i])},
                )

        if learning:
            updates_due += num_envs * s.updates_per_step
            while updates_due >= 1.0:
                metrics = agent.update(buffer.sample(s.batch_size))
                updates_due -= 1.0
                n_updates += 1

        if step >= next_log:
            now = time.perf_counter()
            record = {"steps_per_second": (step - step_log) / (now - t_log), "updates": n_updates}
            if metrics is not None:
                record.update({k: float(v) for k, v in metrics.items()})
            logger.log("update", step, record)
            t_log, step_log = now, step
            next_log += s.log_every

    run_eval()
    bar.close()
    wall = time.perf_counter() - t0
    return {
        "steps": step,
        "updates": n_updates,
        "final_return": last_eval["return_mean"],
        "best_return": best,
        "wall_time": wall,
        "steps_per_second": step / wall,
    }
