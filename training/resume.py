"""What a run directory's `.hydra/` records: its config (rebuilt for resume and evaluate.py), and
the config group choices and command-line overrides that made it (for summary.json and aggregate.py)."""
from __future__ import annotations

import os

from omegaconf import DictConfig, OmegaConf

from training.config import ConfigError

# What may change when a run continues: how long it goes on, and how it reports.
RESUMABLE_OVERRIDES = ("total_steps", "progress", "logger.", "wandb.", "resume", "hydra.")


def load_run_config(run_dir: str) -> DictConfig:
    path = os.path.join(run_dir, ".hydra", "config.yaml")
    if not os.path.isdir(run_dir):
        raise ConfigError(f"run directory '{run_dir}' does not exist; pass a directory a training run wrote (outputs/<date>/<time>).")
    if not os.path.exists(path):
        raise ConfigError(f"'{run_dir}' has no .hydra/config.yaml, so it is not a run directory of train.py; pass the directory a training run wrote.")
    return OmegaConf.load(path)


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


def env_label(choices: dict, env_id: str | None, overrides: list[str]) -> str | None:
    """The name a run's env goes by: its env config group choice (pendulum, ant, ...), unless the
    command line set `env.id`, when the group only supplied defaults and the id names the env."""
    if any(o.lstrip("+~").split("=", 1)[0] == "env.id" for o in overrides):
        return env_id
    return choices.get("env") or env_id


def resume_config(run_dir: str, overrides: list[str]) -> DictConfig:
    """The saved config with the command line's `total_steps`/`progress`/`logger.*`/`wandb.*`
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
            f"changed (only total_steps, progress, logger.* and wandb.*). Start a new run to change it."
        )
    kept = [o for o in overrides if not o.startswith(("resume=", "hydra."))]
    cfg.merge_with(OmegaConf.from_dotlist(kept))
    cfg.resume = run_dir
    return cfg
