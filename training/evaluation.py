"""Evaluate a saved run: rebuild it from its config, restore a checkpoint, run episodes, and
optionally record videos and export the policy."""
from __future__ import annotations

import json
import os

from omegaconf import OmegaConf

from envs.factory import check_action_space, make_env
from envs.video import record_videos
from training.builder import agent_class, build_agent, eval_env_args
from training.checkpoints import Checkpointer, resolve_checkpoint, verify
from training.episodes import evaluate
from training.resume import load_run_config
from training.runner import describe
from training.seeding import configure_devices, seed_everything


def evaluate_run(run_dir: str, checkpoint: str = "latest", episodes: int = 10, seed: int = 12345,
                 video: bool = False, video_episodes: int = 1, export: bool = False) -> dict:
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
    agent = build_agent(cfg, env.observation_space, env.action_space, rng)
    Checkpointer(run_dir, agent.trackables(), describe=describe(cfg)).restore(path, agent_only=True)
    agent.refresh_policy()

    name = str(checkpoint)
    out_dir = os.path.join(run_dir, "eval")
    os.makedirs(out_dir, exist_ok=True)
    result = {"checkpoint": name, "checkpoint_step": meta["step"], "episodes": episodes, "seed": seed,
              "env_id": cfg.env.id, **evaluate(agent, env, episodes, seed)}
    if video:
        recorded = record_videos(lambda obs: agent.act(obs[None], explore=False)[0], cfg.env.id, seed,
                                 video_episodes, os.path.join(out_dir, f"{name}-episode"), **env_args)
        result["videos"] = recorded["paths"]
    if export:
        import tensorflow as tf

        export_dir = os.path.join(run_dir, "export", name)
        module = agent.policy_module()
        tf.saved_model.save(module, export_dir, signatures=module.signatures())
        result["export"] = export_dir
    env.close()
    with open(os.path.join(out_dir, f"{name}.json"), "w") as f:
        json.dump(result, f, indent=2)
    result["json"] = os.path.join(out_dir, f"{name}.json")
    return result
