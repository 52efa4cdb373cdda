"""A run's loggers from its config: the console, CSV, TensorBoard (with the update's graph) and W&B
(its run id kept in the run directory, one group per sweep)."""
from __future__ import annotations

import os
import uuid

from omegaconf import DictConfig, OmegaConf

from training.loggers import ConsoleLogger, CSVLogger, MultiLogger, TensorBoardLogger, WandbLogger


def make_logger(cfg: DictConfig, run_dir: str, console, speed: dict, csv_logger: CSVLogger, learner) -> MultiLogger:
    """The run's loggers: console, CSV, and TensorBoard and W&B as the config asks."""
    loggers = [ConsoleLogger(write=console), csv_logger]
    if cfg.logger.tensorboard:
        tb = TensorBoardLogger(run_dir)
        loggers.append(tb)
        if cfg.logger.trace_graph and (graph := learner.update_graph()) is not None:
            tb.write_graph(graph)
    if cfg.logger.wandb:
        loggers.append(wandb_logger(cfg, run_dir, console, speed))
    return MultiLogger(loggers)


def wandb_config(cfg: DictConfig, decided: dict) -> dict:
    """The config as composed, its `speed` group with what `auto` decided here beside it."""
    config = OmegaConf.to_container(cfg, resolve=True)
    config["speed"] = {**config.get("speed", {}), **decided}
    return config


def wandb_logger(cfg: DictConfig, run_dir: str, console, speed: dict) -> WandbLogger:
    id_file = os.path.join(run_dir, "wandb_id.txt")
    if os.path.exists(id_file):
        with open(id_file) as f:
            run_id = f.read().strip()
    else:
        run_id = uuid.uuid4().hex[:12]
        with open(id_file, "w") as f:
            f.write(run_id)
    w = cfg.wandb
    group, name = w.group, w.name
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    if HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN:
        hc = HydraConfig.get()  # one W&B group per sweep, one run per job named by its overrides
        group = group or os.path.basename(os.path.normpath(hc.sweep.dir))
        name = name or hc.job.override_dirname or f"job{hc.job.num}"
    return WandbLogger(
        run_dir=run_dir, project=w.project, entity=w.entity, group=group, name=name or os.path.basename(run_dir),
        mode=w.mode, tags=list(w.tags or []), run_id=run_id, init_timeout=float(w.init_timeout),
        config=wandb_config(cfg, speed), warn=console,
    )
