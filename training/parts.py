"""Instantiating a config group, and the replay buffer, without TensorFlow: a key the group's
constructor does not take is refused before building, and a constructor's ValueError (a bad
setting) is a ConfigError. benchmarks/memory.py reads a run's buffer layout through here in a
process that never imports TensorFlow."""
from __future__ import annotations

import gymnasium as gym
import numpy as np
from hydra.errors import InstantiationException
from hydra.utils import get_object, instantiate
from omegaconf import DictConfig

from buffers.types import Buffer
from training.config import ConfigError, frame_stack


def check_settings(node: DictConfig, group: str) -> None:
    """Refuse a key that the group's constructor does not take (a typo such as network.hiden, or a
    key added with `+` as Hydra suggests for one), naming the settings it has, before building."""
    import inspect

    import dataclasses

    try:
        target = get_object(node._target_)
        params = dict(inspect.signature(target).parameters)
    except Exception:  # not importable or no signature: instantiate reports it
        return
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        settings = getattr(target, "SETTINGS", None)  # `**settings` declared as a dataclass (agents.mrq)
        if not dataclasses.is_dataclass(settings):
            return
        params = {k: p for k, p in params.items() if p.kind is not inspect.Parameter.VAR_KEYWORD}
        params.update({f.name: f for f in dataclasses.fields(settings)})
    unknown = [str(k) for k in node if not str(k).startswith("_") and k not in params]
    if unknown:
        settings = ", ".join(p for p in params if p != "self")
        raise ConfigError(
            f"{', '.join(f'{group}.{k}' for k in unknown)}: not a setting of {node._target_}, whose settings are "
            f"{settings}. Correct the key (`python train.py --cfg job` prints the composed config)."
        )


def instantiate_checked(node: DictConfig, what: str, **kwargs):
    """hydra.utils.instantiate, with a constructor's ValueError (a bad setting) as a ConfigError."""
    try:
        return instantiate(node, **kwargs)
    except InstantiationException as err:
        if not isinstance(err.__cause__, ValueError):
            raise
        raise ConfigError(f"cannot build {what}: {err.__cause__}") from err


def build_buffer(cfg: DictConfig, obs_space: gym.Space, action_space: gym.Space, rng: np.random.Generator,
                 mask_horizon: int = 0) -> Buffer:
    """The replay buffer of the config, sized for these spaces (preallocated, its pages untouched);
    `buffer.mask_horizon=auto` becomes `mask_horizon`, what the agent's replay declares."""
    discrete = isinstance(action_space, gym.spaces.Discrete)
    check_settings(cfg.buffer, "buffer")
    auto = {"mask_horizon": mask_horizon} if cfg.buffer.get("mask_horizon") == "auto" else {}
    buffer = instantiate_checked(
        cfg.buffer,
        cfg.buffer._target_,
        obs_shape=tuple(int(d) for d in obs_space.shape),
        action_dim=1 if discrete else int(action_space.shape[0]),
        discrete_actions=discrete,
        rng=rng,
        obs_dtype=obs_space.dtype,
        frame_stack=frame_stack(cfg),
        **auto,
    )
    try:
        buffer.check_envs(int(cfg.num_envs))
    except ValueError as err:
        raise ConfigError(f"cannot build {cfg.buffer._target_}: {err}") from err
    return buffer
