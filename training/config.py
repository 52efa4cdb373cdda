"""Checks on a composed run config, each failing with a message that names the fix; and the
composing itself, for code that builds a run's parts without train.py's command line."""
from __future__ import annotations

import re
import shlex
from collections.abc import Sequence

from omegaconf import DictConfig

from training.plugins import CONF_DIR

HYDRA_PLAIN = re.compile(r"[\w./:@+%-]+( [\w./:@+%-]+)*")  # what Hydra's override grammar reads unquoted


class ConfigError(ValueError):
    """A run config that cannot work; the message says what to change."""


def override(key: str, value) -> str:
    """`key=value` as one command-line argument to paste back into a shell: the value quoted for
    Hydra's override grammar where it holds characters the grammar reads (a run dir with a comma
    or brackets), then the whole for the shell (a space)."""
    text = str(value)
    if not HYDRA_PLAIN.fullmatch(text):
        text = "'" + text.replace("'", "\\'") + "'"
    return shlex.quote(f"{key}={text}")


EXAMPLES = {"num_envs": 1, "eval_episodes": 10, "train_every": 1, "batch_size": 256}  # else 1000


def _positive_int(cfg: DictConfig, key: str) -> int:
    value = cfg[key]
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ConfigError(f"{key} must be a positive integer, got {value!r}; set e.g. {key}={EXAMPLES.get(key, 1000)}.")
    return value


def _number(value, key: str) -> float:
    """`value` as a float, or a ConfigError naming the key."""
    try:
        if isinstance(value, bool):
            raise ValueError
        return float(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{key} must be a number, got {value!r}.") from None


PIXEL_FRAME_STACK = 3  # renders per observation where env.frame_stack is null (DrQ, DrQ-v2, MR.Q on DMC)


def frame_stack(cfg: DictConfig) -> int:
    """Frames per observation (env.frame_stack: 4 for Atari; null for env=dmc: 3 with pixels, 1 from
    states; 1, or absent, for the rest)."""
    value = cfg.env.get("frame_stack", 1)
    if value is None and "pixels" in cfg.env:  # an env that renders on request (env=dmc)
        value = PIXEL_FRAME_STACK if cfg.env.pixels else 1
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"env.frame_stack must be an integer >= 1 (4 for Atari: the last 4 frames make an "
                          f"observation; null on env=dmc: 3 with pixels, 1 from states), got {value!r}")
    return value


def warnings(cfg: DictConfig) -> list[str]:
    """Settings that run but are probably not what was meant."""
    found = []
    if _number(cfg.updates_per_step, "updates_per_step") == 0:
        found.append("updates_per_step=0: the agent never updates, so it collects data and never learns.")
    return found


def validate(cfg: DictConfig) -> None:
    """Raise ConfigError for settings that would fail later or silently do the wrong thing."""
    if not isinstance(cfg.seed, int) or isinstance(cfg.seed, bool) or not 0 <= cfg.seed < 2**31:
        # numpy and gymnasium refuse negative seeds, np.random.seed those from 2**32; the eval env's
        # seed and a reset on resume add to it, which the ceiling leaves room for
        raise ConfigError(f"seed must be an integer in [0, 2**31), got {cfg.seed!r}; set e.g. seed=0.")
    total = _positive_int(cfg, "total_steps")
    batch = _positive_int(cfg, "batch_size")
    _positive_int(cfg, "eval_every")
    _positive_int(cfg, "eval_episodes")
    _positive_int(cfg, "num_envs")
    _positive_int(cfg, "train_every")
    starts = cfg.learning_starts
    if not isinstance(starts, int) or starts < 0:
        raise ConfigError(f"learning_starts must be a non-negative integer, got {starts!r}.")
    if starts >= total and "population" not in cfg.agent:  # a population (agent=ga) never acts at random
        raise ConfigError(
            f"learning_starts ({starts}) must be smaller than total_steps ({total}), or the agent "
            f"never learns; lower learning_starts or raise total_steps."
        )
    capacity = cfg.buffer.capacity
    if batch > capacity:
        raise ConfigError(
            f"batch_size ({batch}) is larger than the replay buffer's capacity ({capacity}); "
            f"lower batch_size or raise buffer.capacity."
        )
    buf = cfg.buffer
    if "n_step" in buf and (not isinstance(buf.n_step, int) or buf.n_step < 1):
        raise ConfigError(f"buffer.n_step must be an integer >= 1 (1 = one-step returns), got {buf.n_step!r}.")
    if "alpha" in buf and _number(buf.alpha, "buffer.alpha") < 0:
        raise ConfigError(f"buffer.alpha must be >= 0 (0 samples uniformly), got {buf.alpha}.")
    if "beta" in buf and not 0.0 <= _number(buf.beta, "buffer.beta") <= 1.0:
        raise ConfigError(f"buffer.beta must lie in [0, 1], got {buf.beta}.")
    if _number(cfg.updates_per_step, "updates_per_step") < 0:
        raise ConfigError(f"updates_per_step must be >= 0, got {cfg.updates_per_step}.")
    if not 0.0 <= _number(cfg.gamma, "gamma") <= 1.0:
        raise ConfigError(f"gamma must lie in [0, 1], got {cfg.gamma}.")
    ckpt = cfg.checkpoint
    if not isinstance(ckpt.every, int) or isinstance(ckpt.every, bool) or ckpt.every < 0:
        raise ConfigError(f"checkpoint.every must be a non-negative integer (0 = only at the end), got {ckpt.every!r}; set e.g. checkpoint.every=50000.")
    if not isinstance(ckpt.keep, int) or isinstance(ckpt.keep, bool) or ckpt.keep < 1:
        raise ConfigError(f"checkpoint.keep must be a positive integer, got {ckpt.keep!r}; set e.g. checkpoint.keep=3.")
    for key in ("buffer", "best"):
        if not isinstance(ckpt.get(key, False), bool):
            raise ConfigError(f"checkpoint.{key} must be true or false, got {ckpt[key]!r}.")
    every = cfg.logger.every
    if not isinstance(every, int) or isinstance(every, bool) or every <= 0:
        raise ConfigError(f"logger.every must be a positive integer, got {every!r}; set e.g. logger.every=1000.")
    env_kwargs = cfg.env.get("kwargs") or {}
    if cfg.env.get("max_episode_steps") is not None and env_kwargs.get("terminal_on_life_loss", False):
        skip, steps = cfg.env.get("frame_skip", 4), cfg.env.max_episode_steps
        frames = skip * steps if isinstance(skip, int) and isinstance(steps, int) else f"{skip}x{steps}"
        raise ConfigError(
            f"env.max_episode_steps={steps} with env.kwargs.terminal_on_life_loss=true: a training "
            f"episode is one life there, so a step limit on top would count each life apart and leave the game "
            f"running when it cuts one. Limit whole games with env.max_frames_per_episode="
            f"{frames} (emulator frames: {steps} steps at "
            f"env.frame_skip={skip}) and env.max_episode_steps=null, or train on whole games with "
            f"env.kwargs.terminal_on_life_loss=false."
        )
    validate_speed(cfg.speed, batch, unshardable(cfg.network))


def unshardable(network: DictConfig) -> str | None:
    """Why a network's update cannot be cut into batch shards, or None if it can."""
    if network.get("batch_renorm", False) is True:
        return ("with network.batch_renorm=true: Batch Renormalization normalizes each row by the statistics of the "
                "whole batch, which shards would cut into parts")
    if str(network.get("_target_", "")).endswith("sale.SALE"):
        return "with network=sale: TD7's networks take several inputs, which the shards do not split"
    return None


def validate_speed(speed: DictConfig, batch_size: int, unshardable: str | None = None) -> None:
    """The `speed` group: each setting in its range, `auto` where it may be."""
    if speed.compile not in ("eager", "graph", "xla", "auto"):
        raise ConfigError(f"speed.compile must be eager, graph, xla or auto, got {speed.compile!r}; set e.g. speed=fast "
                          f"(auto) or speed=eager.")
    for key in ("fuse_updates", "numpy_acting"):
        if not isinstance(speed[key], bool):
            raise ConfigError(f"speed.{key} must be true or false, got {speed[key]!r}.")
    if speed.get("env_in_graph", "auto") not in ("auto", True, False):
        raise ConfigError(f"speed.env_in_graph must be auto, true or false, got {speed.env_in_graph!r}.")
    spc = speed.steps_per_call
    if spc != "auto" and (not isinstance(spc, int) or isinstance(spc, bool) or spc < 0):
        raise ConfigError(
            f"speed.steps_per_call must be a non-negative integer (env steps per compiled call; 0 = one "
            f"call per update phase) or auto, got {spc!r}; set e.g. speed.steps_per_call=1000."
        )
    for name, value in (speed.get("threads") or {}).items():
        if name not in ("inter_op", "intra_op"):
            raise ConfigError(f"speed.threads.{name} is not a thread pool; the pools are speed.threads.inter_op and speed.threads.intra_op.")
        if value is None or value == "auto":
            continue
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ConfigError(f"speed.threads.{name} must be a positive integer, null (TF's default) or auto, got {value!r}.")
    shards = speed.batch_shards
    if shards != "auto":
        if not isinstance(shards, int) or isinstance(shards, bool) or shards < 1:
            raise ConfigError(f"speed.batch_shards must be a positive integer or auto, got {shards!r}; set e.g. speed.batch_shards=auto.")
        if shards > 1 and unshardable:
            raise ConfigError(f"speed.batch_shards={shards} {unshardable}; set speed.batch_shards=1 (or auto, which "
                              f"picks 1 for such a network).")
        if batch_size % shards:
            raise ConfigError(
                f"batch_size ({batch_size}) does not split into speed.batch_shards={shards} equal shards; set a "
                f"batch_size divisible by {shards}, or speed.batch_shards=auto."
            )
    if speed.vectorization not in ("sync", "async"):
        raise ConfigError(f"speed.vectorization must be sync or async, got {speed.vectorization!r}; set speed.vectorization=sync.")
    if speed.update_precision not in ("float32", "bfloat16"):
        raise ConfigError(
            f"speed.update_precision must be float32 or bfloat16, got {speed.update_precision!r}; set "
            f"speed.update_precision=float32 (the default) or bfloat16 (the update's matmuls and convolutions in bfloat16)."
        )


def compose_config(overrides: Sequence[str] = (), name: str = "config", **kwargs) -> DictConfig:
    """The config `name` composed from conf/ with `overrides`, as its entrypoint would compose it
    (train.py's: "config"), for the benchmarks and tests that build a run's parts without its
    command line. `kwargs` go to Hydra's compose (return_hydra_config)."""
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        return compose(config_name=name, overrides=list(overrides), **kwargs)
