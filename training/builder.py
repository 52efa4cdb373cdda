"""Build a run's parts from its composed config: envs, agent, buffer, loggers.

Values that come from the environment (observation size, action bounds) are passed to the
constructors as keyword arguments at the call site; they are never written into the config.
"""
from __future__ import annotations

from dataclasses import dataclass

import gymnasium as gym
import numpy as np
from hydra.errors import InstantiationException
from hydra.utils import get_class, get_object, instantiate
from omegaconf import DictConfig

from agents.base import Agent
from buffers.types import Buffer
from envs.factory import check_action_space, make_env, make_vector_env
from training.config import ConfigError, validate
from training.loop import LoopSettings
from training.seeding import (
    auto_batch_shards,
    auto_inter_op,
    auto_intra_op,
    available_cores,
    configure_devices,
    configure_threads,
    seed_everything,
)


@dataclass
class Run:
    agent: Agent
    buffer: Buffer
    envs: gym.vector.VectorEnv
    eval_env: gym.Env
    rng: np.random.Generator

    def close(self) -> None:
        self.envs.close()
        self.eval_env.close()


def agent_class(cfg: DictConfig) -> type:
    try:
        return get_class(cfg.agent._target_)
    except Exception as err:  # hydra wraps import errors; name the key that is wrong
        raise ConfigError(f"agent._target_={cfg.agent._target_!r} cannot be imported: {err}") from err


def build_agent(cfg: DictConfig, obs_space: gym.Space, action_space: gym.Space, rng: np.random.Generator,
                shards: int | None = None) -> Agent:
    """The agent of `cfg`; `shards` is its `batch_shards(cfg)` where the caller has it already."""
    if len(obs_space.shape) != 1:
        raise ConfigError(
            f"{cfg.env.id} has observations of shape {obs_space.shape}; the MLP networks need flat "
            f"vectors. Flatten them with a wrapper or pick an env with vector observations."
        )
    check_settings(cfg.network, "network")
    check_settings(cfg.agent, "agent")
    kwargs: dict = {"obs_dim": int(obs_space.shape[0]), "network": instantiate(cfg.network), "rng": rng}
    if "batch_shards" in cfg.agent:  # `auto` decided here; configs saved before it existed lack it
        kwargs["batch_shards"] = batch_shards(cfg) if shards is None else shards
    if isinstance(action_space, gym.spaces.Box):
        kwargs.update(action_low=action_space.low, action_high=action_space.high)
    else:
        kwargs.update(num_actions=int(action_space.n))
    return _instantiate(cfg.agent, f"{cfg.agent._target_} with network {cfg.network._target_}", **kwargs)


def inter_op_pool(cfg: DictConfig) -> int | None:
    """The inter-op pool size the run asks for (None: TF's default), with `auto` decided."""
    value = (cfg.get("tf_threads") or {}).get("inter_op")
    return auto_inter_op(cfg.network.get("hidden")) if value == "auto" else value


def batch_shards(cfg: DictConfig) -> int:
    """The agent's `batch_shards` (the top-level value, unless agent.batch_shards is set apart;
    1 for a saved config from before it existed), with `auto` decided for this machine
    (`auto_batch_shards`). One inter-op thread cannot run shards side by side, so then 1."""
    value = cfg.agent.get("batch_shards", 1)
    if value != "auto":
        return int(value)
    if inter_op_pool(cfg) == 1:
        return 1
    import tensorflow as tf  # listing devices does not start TF's runtime: threads can still be set

    gpus = len(tf.config.list_physical_devices("GPU"))
    return auto_batch_shards(str(cfg.compile), cfg.network.get("hidden"), int(cfg.batch_size), available_cores(), gpus)


def check_settings(node: DictConfig, group: str) -> None:
    """Refuse a key that the group's constructor does not take (a typo such as network.hiden, or a
    key added with `+` as Hydra suggests for one), naming the settings it has, before building."""
    import inspect

    try:
        params = inspect.signature(get_object(node._target_)).parameters
    except Exception:  # not importable or no signature: instantiate reports it
        return
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return
    unknown = [str(k) for k in node if not str(k).startswith("_") and k not in params]
    if unknown:
        settings = ", ".join(p for p in params if p != "self")
        raise ConfigError(
            f"{', '.join(f'{group}.{k}' for k in unknown)}: not a setting of {node._target_}, whose settings are "
            f"{settings}. Correct the key (`python train.py --cfg job` prints the composed config)."
        )


def _instantiate(node: DictConfig, what: str, **kwargs):
    """hydra.utils.instantiate, with a constructor's ValueError (a bad setting) as a ConfigError."""
    try:
        return instantiate(node, **kwargs)
    except InstantiationException as err:
        if not isinstance(err.__cause__, ValueError):
            raise
        raise ConfigError(f"cannot build {what}: {err.__cause__}") from err


def eval_env_args(cfg: DictConfig) -> dict:
    """Time limit and kwargs of evaluation episodes: `env.eval_max_episode_steps` when set."""
    limit = cfg.env.get("eval_max_episode_steps") or cfg.env.max_episode_steps
    return dict(max_episode_steps=limit, kwargs=cfg.env.kwargs)


def build_run(cfg: DictConfig, with_buffer: bool = True) -> Run:
    validate(cfg)
    shards = batch_shards(cfg)
    threads = cfg.get("tf_threads") or {}
    explicit = {k: v for k, v in threads.items() if v != "auto"}
    configure_threads(**explicit)
    hints = {  # speed hints: applied where they still can be, after the explicit sizes
        "inter_op": inter_op_pool(cfg) if threads.get("inter_op") == "auto" else None,
        # the cores divided among the shards, where shards run side by side: graph mode, a pool
        "intra_op": auto_intra_op(shards, available_cores())
        if threads.get("intra_op") == "auto" and cfg.compile == "graph" and inter_op_pool(cfg) != 1 else None,
    }
    configure_threads(**hints, required=False)
    configure_devices()
    rng = seed_everything(int(cfg.seed), deterministic=bool(cfg.deterministic))
    cls = agent_class(cfg)
    env_args = dict(max_episode_steps=cfg.env.max_episode_steps, kwargs=cfg.env.kwargs)
    eval_env = make_env(cfg.env.id, seed=int(cfg.seed) + 100, **eval_env_args(cfg))
    check_action_space(eval_env.action_space, cls.ACTION_KIND, cfg.env.id, cls.__name__)
    envs = make_vector_env(
        cfg.env.id, int(cfg.num_envs), seed=int(cfg.seed), vectorization=cfg.vectorization, **env_args
    )
    obs_space, action_space = envs.single_observation_space, envs.single_action_space
    agent = build_agent(cfg, obs_space, action_space, rng, shards)
    buffer = build_buffer(cfg, obs_space, action_space, rng) if with_buffer else None
    return Run(agent=agent, buffer=buffer, envs=envs, eval_env=eval_env, rng=rng)


def build_buffer(cfg: DictConfig, obs_space: gym.Space, action_space: gym.Space, rng: np.random.Generator) -> Buffer:
    """The replay buffer of the config, sized for these spaces (preallocated, its pages untouched)."""
    discrete = isinstance(action_space, gym.spaces.Discrete)
    check_settings(cfg.buffer, "buffer")
    return _instantiate(
        cfg.buffer,
        cfg.buffer._target_,
        obs_dim=int(obs_space.shape[0]),
        action_dim=1 if discrete else int(action_space.shape[0]),
        discrete_actions=discrete,
        rng=rng,
    )


def loop_settings(cfg: DictConfig) -> LoopSettings:
    return LoopSettings(
        total_steps=int(cfg.total_steps),
        learning_starts=int(cfg.learning_starts),
        batch_size=int(cfg.batch_size),
        updates_per_step=float(cfg.updates_per_step),
        eval_every=int(cfg.eval_every),
        eval_episodes=int(cfg.eval_episodes),
        log_every=int(cfg.log_every),
        seed=int(cfg.seed),
        checkpoint_every=int(cfg.checkpoint_every),
        train_every=int(cfg.train_every),
        fuse_updates=bool(cfg.fuse_updates),
        steps_per_call=int(cfg.steps_per_call),
        progress=bool(cfg.progress),
    )
