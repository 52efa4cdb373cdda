"""A saved run evaluated, recorded and exported (evaluate.py): its config reloaded, its agent
rebuilt and a checkpoint restored into it (weights only: nothing of it is unpickled), then
deterministic episodes (training.evaluation.evaluate), videos, a SavedModel, an ONNX model and a
model folder in the Hugging Face Hub's layout (training.hub) as asked."""
from __future__ import annotations

import json
import os
import tempfile

from omegaconf import OmegaConf

import numpy as np

from agents.export import export_onnx, export_policy
from envs.factory import check_action_space, make_env
from envs.video import VideoError, record_videos
from training.builder import agent_class, build_learner, describe, eval_env_args, eval_epsilon
from training.checkpoints import Checkpointer, resolve_checkpoint, verify
from training.config import ConfigError
from training.evaluation import epsilon_greedy, evaluate
from training.hub import write_model_folder
from training.resume import load_run_config, run_identity
from training.seeding import seed_everything
from training.speed import configure_devices


class OutputError(ConfigError):
    """Where the evaluation's results would go cannot be written."""


def writable(directory: str) -> str:
    """`directory`, made and written to once, or an OutputError naming the fix (before any work)."""
    try:
        os.makedirs(directory, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=directory):
            pass
    except OSError as err:
        raise OutputError(
            f"cannot write the evaluation's results to {directory} ({err.strerror or err}). A run directory on a "
            f"read-only or shared mount can still be evaluated: pass out_dir=<a directory you can write> (e.g. "
            f"out_dir=$HOME/evals/<run>) and eval/<checkpoint>.json, the videos and export/ go there; the run directory "
            f"is only read.") from err
    return directory


def evaluate_run(run_dir: str, checkpoint: str = "latest", episodes: int = 10, seed: int = 12345,
                 video: bool = False, video_episodes: int = 1, export: str | None = None, out_dir: str | None = None,
                 hub: bool = False) -> dict:
    """`export`: None, "savedmodel" or "onnx" (the SavedModel, and the ONNX model converted from
    it, checked on 64 observations drawn from the observation space). `hub`: the model folder in
    hub/<checkpoint>/ too, which needs a video and a SavedModel, so it turns both on. `out_dir`:
    where eval/, export/ and hub/ are written (None: the run directory)."""
    if hub:
        video, export = True, export or "savedmodel"
    cfg = load_run_config(run_dir)
    OmegaConf.resolve(cfg)
    path = resolve_checkpoint(run_dir, checkpoint)
    meta = verify(path)
    eval_dir = writable(os.path.join(out_dir or run_dir, "eval"))
    export_dir = writable(os.path.join(out_dir or run_dir, "export")) if export else None
    hub_dir = writable(os.path.join(out_dir or run_dir, "hub")) if hub else None
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
    result = {"checkpoint": name, "checkpoint_step": meta["step"], "episodes": episodes, "seed": seed,
              "env_id": cfg.env.id, **evaluate(learner, env, episodes, seed, epsilon=eval_epsilon(cfg))}
    if video:
        policy = epsilon_greedy(lambda obs: learner.act(obs[None], explore=False)[0], env.action_space,
                                eval_epsilon(cfg), seed)
        try:
            recorded = record_videos(policy, cfg.env.id, seed, video_episodes,
                                     os.path.join(eval_dir, f"{name}-episode"), **env_args)
        except VideoError as err:
            if not hub:
                raise
            raise VideoError(f"{err} (hub=true records the model folder's replay.mp4, so the env must render.)") from err
        result["videos"] = recorded["paths"]
    if export:
        result["export"] = export_policy(learner.agent, os.path.join(export_dir, name), learner.obs_norm)
    space = env.observation_space
    env.close()
    result["json"] = write_result(eval_dir, name, result)  # before the ONNX conversion, which may fail
    if export == "onnx":
        space.seed(seed)
        observations = np.stack([space.sample() for _ in range(64)]).astype(learner.agent.acting.obs_dtype.as_numpy_dtype)
        onnx = export_onnx(result["export"], os.path.join(export_dir, f"{name}.onnx"), observations)
        result["onnx"], result["onnx_largest_difference"] = onnx["path"], onnx["largest_difference"]
        write_result(eval_dir, name, result)
    if hub:
        identity = run_identity(cfg, run_dir)
        epsilon = eval_epsilon(cfg)
        kind = ("Deterministic policy" if cfg.agent.get("deterministic_eval", True) else "Policy sampled")
        kind += f", a uniform random action with probability {epsilon:g}" if epsilon else ""
        result["hub"] = write_model_folder(
            os.path.join(hub_dir, name), run_dir, path, result, algorithm=cls.__name__, env=cfg.env.get("label") or cfg.env.id,
            overrides=identity["overrides"], meta=meta, policy_kind=kind)
        write_result(eval_dir, name, result)
    return result


def write_result(eval_dir: str, name: str, result: dict) -> str:
    path = os.path.join(eval_dir, f"{name}.json")
    with open(path, "w") as f:
        json.dump({k: v for k, v in result.items() if k != "json"}, f, indent=2)
    return path
