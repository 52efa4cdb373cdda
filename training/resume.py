"""What a run directory's `.hydra/` records: its config (rebuilt for resume and evaluate.py), and
the config group choices and command-line overrides that made it (for summary.json and aggregate.py)."""
from __future__ import annotations

import os
import re

from omegaconf import DictConfig, OmegaConf, open_dict

from training.config import ConfigError

# What may change when a run continues: how long it goes on, and how it reports.
# The speed settings too: none of them changes the maths (a run may move to a machine with a GPU).
RESUMABLE_OVERRIDES = ("total_steps", "logger.", "wandb.", "speed.", "resume", "hydra.")

# Where the keys of configs saved before the `speed` group and the checkpoint/logger nodes now live.
MOVED_KEYS = {
    "compile": "speed.compile", "fuse_updates": "speed.fuse_updates", "steps_per_call": "speed.steps_per_call",
    "batch_shards": "speed.batch_shards", "update_precision": "speed.update_precision",
    "vectorization": "speed.vectorization", "tf_threads": "speed.threads",
    "checkpoint_every": "checkpoint.every", "checkpoint_keep": "checkpoint.keep",
    "save_buffer": "checkpoint.buffer", "save_best": "checkpoint.best",
    "log_every": "logger.every", "progress": "logger.progress",
}
SPEED_DEFAULTS = {"compile": "graph", "fuse_updates": True, "steps_per_call": 0, "batch_shards": 1,
                  "update_precision": "float32", "numpy_acting": True, "vectorization": "sync",
                  "threads": {"inter_op": None, "intra_op": None}}


# Agent settings added with a default that changed the maths: the value a config saved before the
# setting existed ran with, so that its run resumes as it began.
ADDED_AGENT_SETTINGS = {
    "agents.sac.SAC": {"tanh_epsilon": 0.0},  # the exact tanh correction, before SB3's 1e-6
    "agents.crossq.CrossQ": {"tanh_epsilon": 0.0},
}


# Classes that moved, by the `_target_` a config saved before the move names.
MOVED_TARGETS = {"networks.mrq.MRQNetworks": "agents.mrq.MRQNetworks"}  # into MR.Q's folder


def described_today(key: str, value):
    """A checkpoint's recorded `agent` target or `network` config (training.builder.describe) with
    the classes that moved since under their new names, to compare with today's."""
    if key == "agent" and value in MOVED_TARGETS:
        return MOVED_TARGETS[value]
    if key == "network" and isinstance(value, dict) and value.get("_target_") in MOVED_TARGETS:
        return {**value, "_target_": MOVED_TARGETS[value["_target_"]]}
    return value


def settings_added_since(saved: DictConfig) -> dict:
    """The ADDED_AGENT_SETTINGS a saved run config lacks, at the values its run had."""
    agent = saved.get("agent")
    added = ADDED_AGENT_SETTINGS.get(agent.get("_target_"), {}) if isinstance(agent, DictConfig) else {}
    return {key: value for key, value in added.items() if key not in agent}


def upgrade_config(cfg: DictConfig) -> DictConfig:
    """A run config saved before the `speed` group existed, in today's layout: the speed keys under
    `speed` (the agents' copies of them dropped; `agent.fast_act` is `speed.numpy_acting`), the
    checkpoint and logging keys under their nodes; an agent setting added since (ADDED_AGENT_SETTINGS)
    at the value the run had; a class that moved under its new name (MOVED_TARGETS). A config in today's layout comes back as it is."""
    moved = [group for group in ("agent", "network", "buffer") if OmegaConf.select(cfg, f"{group}._target_") in MOVED_TARGETS]
    if moved:
        cfg = cfg.copy()
        for group in moved:
            cfg[group]._target_ = MOVED_TARGETS[cfg[group]._target_]
    missing = settings_added_since(cfg)
    if missing:
        cfg = cfg.copy()
        with open_dict(cfg.agent):
            cfg.agent.update(missing)
    old = OmegaConf.to_container(cfg)
    if "speed" in old:
        return cfg
    new = {k: v for k, v in old.items() if k not in MOVED_KEYS}
    new["speed"] = dict(SPEED_DEFAULTS)
    agent = dict(new.get("agent") or {})
    for key in ("compile", "batch_shards", "update_precision"):
        agent.pop(key, None)
    if "fast_act" in agent:
        new["speed"]["numpy_acting"] = agent.pop("fast_act")
    new["agent"] = agent
    for key, path in MOVED_KEYS.items():
        if key in old:
            node, name = path.split(".")
            new.setdefault(node, {})[name] = old[key]
    return OmegaConf.create(new)


# What a saved run's config may instantiate: this project's own classes and builders. A `_target_`
# names any callable, so a run directory from elsewhere could otherwise run a command on resume or
# evaluate (`_target_: os.system`), as a pickle could.
# A target is <package>.<module>.<name>, literally (no interpolation): a name one dot deeper could
# reach through a module's imports to anything (agents.td3.os.system).
TRUSTED_TARGETS = ("agents.", "networks.", "buffers.", "envs.")
_TARGET = re.compile(r"^(agents|networks|buffers|envs)\.[a-z_][a-z_0-9]*\.[A-Za-z][A-Za-z_0-9]*$")


def check_targets(node, run_dir: str, where: str = "") -> None:
    """Refuse a saved config whose `_target_`s name anything outside TRUSTED_TARGETS."""
    if isinstance(node, dict):
        target = node.get("_target_")
        if target is not None and not (isinstance(target, str) and _TARGET.match(target)):
            raise ConfigError(
                f"the saved config of {run_dir} has {where + '.' if where else ''}_target_={target!r}, which is not one "
                f"of this project's classes (a module under {', '.join(t.rstrip('.') + '/' for t in TRUSTED_TARGETS)}); "
                f"building the run would call it, so the run directory is refused. If you added that class yourself, "
                f"move it under agents/, networks/ or buffers/; otherwise the directory was altered: do not use it."
            )
        for key, value in node.items():
            check_targets(value, run_dir, f"{where}.{key}" if where else str(key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            check_targets(value, run_dir, f"{where}[{i}]")


def load_run_config(run_dir: str) -> DictConfig:
    """A run directory's saved config, in today's layout, with nothing to instantiate but this
    project's own classes."""
    path = os.path.join(run_dir, ".hydra", "config.yaml")
    if not os.path.isdir(run_dir):
        raise ConfigError(f"run directory '{run_dir}' does not exist; pass a directory a training run wrote (outputs/<date>/<time>).")
    if not os.path.exists(path):
        raise ConfigError(f"'{run_dir}' has no .hydra/config.yaml, so it is not a run directory of train.py; pass the directory a training run wrote.")
    cfg = upgrade_config(OmegaConf.load(path))
    check_targets(OmegaConf.to_container(cfg, resolve=False), run_dir)
    return cfg


def hydra_record(run_dir: str) -> tuple[dict, list[str]]:
    """The config group choices (`{"agent": "td3", ...}`) and the command-line overrides of the run
    in `run_dir`, from `.hydra/hydra.yaml` and `.hydra/overrides.yaml`; empty where a file is absent."""
    hydra_dir = os.path.join(run_dir, ".hydra")
    choices, overrides = {}, []
    if os.path.exists(os.path.join(hydra_dir, "hydra.yaml")):
        node = OmegaConf.select(OmegaConf.load(os.path.join(hydra_dir, "hydra.yaml")), "hydra.runtime.choices", default=None)
        choices = OmegaConf.to_container(node) if node is not None else {}
    if os.path.exists(os.path.join(hydra_dir, "overrides.yaml")):
        overrides = [str(o) for o in OmegaConf.load(os.path.join(hydra_dir, "overrides.yaml"))]
    return choices, overrides


def env_label(choices: dict, env_id: str | None, overrides: list[str], label: str | None = None) -> str | None:
    """The name a run's env goes by: its env config group choice (pendulum, ant, ...), or the
    group's `label` where one config holds many tasks (atari-Pong, dmc-walker-walk), unless the
    command line set `env.id`, when the group only supplied defaults and the id names the env."""
    if any(o.lstrip("+~").split("=", 1)[0] == "env.id" for o in overrides):
        return env_id
    return label or choices.get("env") or env_id


def resume_config(run_dir: str, overrides: list[str]) -> DictConfig:
    """The saved config with the command line's `total_steps`/`logger.*`/`wandb.*`/`speed.*`
    applied; any other override is refused, since a resumed run continues the same experiment.
    The saved config is resolved first, so a value that interpolates another keeps what it was:
    extending a run with `total_steps` leaves `buffer.beta_steps: ${total_steps}` at the old total,
    instead of moving prioritized replay's beta back down its schedule."""
    cfg = load_run_config(run_dir)
    OmegaConf.resolve(cfg)
    refused = [o for o in overrides if not o.lstrip("+~").startswith(RESUMABLE_OVERRIDES)]
    if refused:
        raise ConfigError(
            f"resume continues the saved run with its own config, so {', '.join(refused)} cannot be "
            f"changed (only total_steps, logger.*, wandb.* and speed.*). Start a new run to change it."
        )
    kept = [o for o in overrides if not o.startswith(("resume=", "hydra."))]
    cfg.merge_with(OmegaConf.from_dotlist(kept))
    cfg.resume = run_dir
    return cfg


def run_identity(cfg: DictConfig, run_dir: str) -> dict:
    """Who a run is, for summary.json and aggregate.py: agent and env (the config group choices
    when Hydra composed the run), seed, and the command-line overrides that made it."""
    choices, overrides = hydra_record(run_dir)
    return {
        "agent": choices.get("agent") or cfg.agent._target_.rsplit(".", 1)[-1].lower(),
        "env": env_label(choices, cfg.env.id, overrides, cfg.env.get("label")),
        "env_id": cfg.env.id,
        "seed": int(cfg.seed),
        "overrides": [o for o in overrides if not o.startswith(("resume=", "hydra."))],
    }
