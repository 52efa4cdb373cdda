"""Build seeded gymnasium environments, single and vectorized, and check they fit the agent."""
from __future__ import annotations

import difflib
import functools
import importlib
from typing import Any

import gymnasium as gym
import numpy as np

from envs.opengl import opengl_failure
from envs.pixels import StackFrames


class EnvConfigError(ValueError):
    """An environment request that cannot be met; the message names the fix."""


def _check_known(env_id: str) -> None:
    if ":" in env_id:  # gymnasium's "module:Id": the module registers the id when imported, as gym.make does
        module, env_id = env_id.split(":", 1)
        try:
            importlib.import_module(module)
        except ImportError as err:
            raise EnvConfigError(
                f"env.id names the module '{module}' to import before making '{env_id}', and it cannot be "
                f"imported ({err}). Put its directory on PYTHONPATH, or install the package that holds it."
            ) from None
    if env_id in gym.registry:
        return
    close = difflib.get_close_matches(env_id, list(gym.registry.keys()), n=3, cutoff=0.6)
    hint = f" Did you mean {', '.join(close)}?" if close else ""
    raise EnvConfigError(
        f"gymnasium does not know the environment id '{env_id}'.{hint} Pick a config from conf/env/ "
        f"(env=pendulum, env=hopper, ...) or pass a registered id with env.id=<Id>; "
        f"`python -c \"import gymnasium; print(list(gymnasium.registry))\"` lists them."
    )


def check_action_space(space: gym.Space, action_kind: str, env_id: str, agent_name: str) -> None:
    """Raise a clear error when an agent cannot act in this action space. Kind `any`: discrete,
    or continuous as `continuous` asks."""
    if action_kind == "any":
        if isinstance(space, gym.spaces.Discrete):
            return
        action_kind = "continuous"
    if action_kind == "continuous":
        ok = isinstance(space, gym.spaces.Box) and len(space.shape) == 1
        if ok and not (np.all(np.isfinite(space.low)) and np.all(np.isfinite(space.high))):
            raise EnvConfigError(
                f"{agent_name} needs a bounded continuous action space, but {env_id} has "
                f"unbounded actions {space}; wrap the env to give its actions finite bounds."
            )
        need = "a continuous (Box) action space"
    elif action_kind == "discrete":
        ok = isinstance(space, gym.spaces.Discrete)
        need = "a discrete action space"
    else:
        raise ValueError(f"unknown action kind {action_kind!r}")
    if not ok:
        raise EnvConfigError(
            f"{agent_name} needs {need}, but {env_id} has action space {space}. "
            f"Pick an agent for this kind of action (TD3/DDPG/SAC for continuous, DQN for discrete) "
            f"or an env that fits the agent."
        )


def _make(env_id: str, max_episode_steps: int | None, kwargs: dict[str, Any], frame_stack: int = 1) -> gym.Env:
    _check_known(env_id)
    try:
        env = gym.make(env_id, max_episode_steps=max_episode_steps, **dict(kwargs or {}))
        return StackFrames(env, frame_stack) if frame_stack > 1 else env
    except gym.error.DependencyNotInstalled as err:  # e.g. Box2D for CarRacing, LunarLander
        raise EnvConfigError(
            f"{env_id} needs a package that is not installed: {str(err).rstrip('.')}. In this project's environment "
            f"that is `uv pip install ...` with the same packages (`uv add` to keep them in pyproject.toml)."
        ) from err
    except (ValueError, TypeError) as err:  # a bad env setting: name it
        raise EnvConfigError(f"cannot make {env_id} with env.kwargs={dict(kwargs or {})}: {err}") from err
    except Exception as err:  # MuJoCo's envs load the OpenGL backend MUJOCO_GL names when they import mujoco
        failure = opengl_failure(err)
        if failure is None:
            raise
        raise EnvConfigError(f"cannot make {env_id}. {failure}") from err


def _make_in_worker(env_id: str, max_episode_steps: int | None, kwargs: dict[str, Any], frame_stack: int = 1) -> gym.Env:
    """`_make` in an async vector env's worker process, which leaves SIGINT and SIGTERM to the
    training process: Ctrl-C (or a cluster's SIGTERM) reaches the whole process group, and the
    training process must stop at a checkpoint and close its workers, not lose them mid-step."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    return _make(env_id, max_episode_steps, kwargs, frame_stack)


def make_env(
    env_id: str,
    seed: int,
    max_episode_steps: int | None = None,
    kwargs: dict[str, Any] | None = None,
    render_mode: str | None = None,
    frame_stack: int = 1,
) -> gym.Env:
    """One environment with episode statistics, its action space seeded; with `frame_stack` > 1
    its image observations are the last k frames (`envs.pixels.StackFrames`). Reset it with
    `env.reset(seed=...)` to seed the dynamics."""
    kw = dict(kwargs or {})
    if render_mode is not None:
        kw["render_mode"] = render_mode
    env = gym.wrappers.RecordEpisodeStatistics(_make(env_id, max_episode_steps, kw, frame_stack))
    env.action_space.seed(seed)
    return env


def make_vector_env(
    env_id: str,
    num_envs: int,
    seed: int,
    max_episode_steps: int | None = None,
    kwargs: dict[str, Any] | None = None,
    vectorization: str = "sync",
    frame_stack: int = 1,
) -> gym.vector.VectorEnv:
    """`num_envs` copies in gymnasium's vector API with same-step autoreset: when an episode ends,
    the step returns the first observation of the next one and the last observation of the old one
    is in `info["final_obs"]`, so every step yields a valid transition."""
    if num_envs < 1:
        raise EnvConfigError(f"num_envs must be at least 1, got {num_envs}")
    if vectorization not in ("sync", "async"):
        raise EnvConfigError(f"vectorization must be sync or async, got {vectorization!r}; set vectorization=sync.")
    _check_known(env_id)
    # partials, not lambdas: a sync vector env stays picklable (checkpoints store it)
    make = _make if vectorization == "sync" else _make_in_worker
    fns = [functools.partial(make, env_id, max_episode_steps, dict(kwargs or {}), frame_stack) for _ in range(num_envs)]
    mode = gym.vector.AutoresetMode.SAME_STEP
    cls = gym.vector.SyncVectorEnv if vectorization == "sync" else gym.vector.AsyncVectorEnv
    envs = gym.wrappers.vector.RecordEpisodeStatistics(cls(fns, autoreset_mode=mode))
    envs.action_space.seed(seed)
    return envs


def check_same_step_autoreset(envs: gym.vector.VectorEnv) -> None:
    """Refuse vector envs that do not reset in the step an episode ends (gymnasium's default is the
    next step): the loop stores each step as a transition and reads the last observation of an
    ended episode from `info["final_obs"]`, which only same-step autoreset gives."""
    mode = envs.metadata.get("autoreset_mode", gym.vector.AutoresetMode.NEXT_STEP)
    if mode != gym.vector.AutoresetMode.SAME_STEP:
        raise EnvConfigError(
            f"the training envs reset in autoreset mode {getattr(mode, 'value', mode)!r}, but the off-policy loop needs "
            f"same-step autoreset: it stores every step as a transition and reads an ended episode's last observation "
            f"from info['final_obs']. Make them with autoreset_mode=gymnasium.vector.AutoresetMode.SAME_STEP (as "
            f"envs.factory.make_vector_env does), e.g. gymnasium.vector.SyncVectorEnv(fns, "
            f"autoreset_mode=gymnasium.vector.AutoresetMode.SAME_STEP).")


def transition_next_obs(next_obs: np.ndarray, infos: dict, done: np.ndarray) -> np.ndarray:
    """With same-step autoreset, a finished env's `next_obs` is already the next episode's first
    observation; the true last observation is in `infos["final_obs"]`."""
    if not done.any():
        return next_obs
    real = next_obs.copy()
    for i in np.flatnonzero(done):
        real[i] = infos["final_obs"][i]
    return real


def finished_games(infos: dict, done: np.ndarray) -> list[tuple[float, int]]:
    """(score, length) of each game a vector step ended, where the env reports its games apart from
    its episodes (Atari's `game_score`: a training episode there is one life); none elsewhere. A game
    ends with an episode: in its last step (the final info) or, rarely, in the steps of the reset
    that same-step autoreset made (that reset's info)."""
    if not done.any():
        return []
    return [(float(info["game_score"][i]), int(info["game_length"][i]))
            for info in (infos.get("final_info") or {}, infos) if "game_score" in info
            for i in np.flatnonzero(info["_game_score"])]
