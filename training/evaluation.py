"""Evaluation: deterministic episodes of a policy (`evaluate`, the one evaluation of train.py,
evaluate.py and benchmarks/sb3_learning.py), and a saved run evaluated, recorded and exported
(`evaluate_run`, evaluate.py's). The module imports no TensorFlow, so that SB3's venv, which has
none, evaluates its runs with the same code; `evaluate_run` loads it when called."""
from __future__ import annotations

import json
import os
from typing import Protocol

import gymnasium as gym
import numpy as np


class Acts(Protocol):
    """What evaluation needs of a policy: actions for a batch of observations (the Agent protocol's
    `act`; sb3_learning.py adapts SB3's `predict` to it)."""

    def act(self, obs: np.ndarray, explore: bool) -> np.ndarray: ...


def evaluate(agent: Acts, env: gym.Env, episodes: int, seed: int) -> dict[str, float]:
    """Deterministic episodes (no exploration noise). The first reset is seeded with `seed`, so
    every evaluation of a run starts from the same initial states."""
    returns, lengths, successes = [], [], []
    obs, _ = env.reset(seed=seed)
    for _ in range(episodes):
        done, ret, length, info = False, 0.0, 0, {}
        while not done:
            action = agent.act(obs[None], explore=False)[0]
            obs, reward, terminated, truncated, info = env.step(action)
            ret += float(reward)
            length += 1
            done = terminated or truncated
        returns.append(ret)
        lengths.append(length)
        if "is_success" in info:  # gymnasium's convention for goal-reaching tasks
            successes.append(float(info["is_success"]))
        obs, _ = env.reset()
    r = np.asarray(returns)
    result = {
        "return_mean": float(r.mean()),
        "return_std": float(r.std()),
        "return_min": float(r.min()),
        "return_max": float(r.max()),
        "length_mean": float(np.mean(lengths)),
    }
    if successes:
        result["success_rate"] = float(np.mean(successes))
    return result


def evaluate_run(run_dir: str, checkpoint: str = "latest", episodes: int = 10, seed: int = 12345,
                 video: bool = False, video_episodes: int = 1, export: bool = False) -> dict:
    from omegaconf import OmegaConf

    from agents.export import export_policy
    from envs.factory import check_action_space, make_env
    from envs.video import record_videos
    from training.builder import agent_class, build_learner, eval_env_args
    from training.checkpoints import Checkpointer, resolve_checkpoint, verify
    from training.resume import load_run_config
    from training.runner import describe
    from training.seeding import seed_everything
    from training.speed import configure_devices

    cfg = load_run_config(run_dir)
    OmegaConf.resolve(cfg)
    path = resolve_checkpoint(run_dir, checkpoint)
    meta = verify(path)
    configure_devices()
    rng = seed_everything(seed)
    env_args = eval_env_args(cfg)
    env = make_env(cfg.env.id, seed=seed, **env_args)
    cls = agent_class(cfg)
    check_action_space(env.action_space, cls.ACTION_KIND, cfg.env.id, cls.__name__)
    learner = build_learner(cfg, env.observation_space, env.action_space, rng)
    Checkpointer(run_dir, learner.trackables(), describe=describe(cfg)).restore(path, agent_only=True)
    learner.refresh()

    name = str(checkpoint)
    out_dir = os.path.join(run_dir, "eval")
    os.makedirs(out_dir, exist_ok=True)
    result = {"checkpoint": name, "checkpoint_step": meta["step"], "episodes": episodes, "seed": seed,
              "env_id": cfg.env.id, **evaluate(learner, env, episodes, seed)}
    if video:
        recorded = record_videos(lambda obs: learner.act(obs[None], explore=False)[0], cfg.env.id, seed,
                                 video_episodes, os.path.join(out_dir, f"{name}-episode"), **env_args)
        result["videos"] = recorded["paths"]
    if export:
        result["export"] = export_policy(learner.agent, os.path.join(run_dir, "export", name), learner.obs_norm)
    env.close()
    with open(os.path.join(out_dir, f"{name}.json"), "w") as f:
        json.dump(result, f, indent=2)
    result["json"] = os.path.join(out_dir, f"{name}.json")
    return result
