"""Train an off-policy agent. Hydra composes the run from conf/:

    python train.py                                  # TD3 on Pendulum-v1
    python train.py agent=td3 env=ant                # the reference TD3 setting on Ant-v5
    python train.py agent=ddpg env=halfcheetah network.hidden=[400,300] seed=3
"""
from __future__ import annotations

import os

# Before TensorFlow is imported anywhere: keep its C++ INFO/WARNING lines off the console.
# Setting TF_ENABLE_ONEDNN_OPTS to its default value only silences the notice that it is unset.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")

import json
import sys

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from envs.factory import EnvConfigError
from training.config import ConfigError, validate


def run(cfg: DictConfig, run_dir: str) -> dict:
    from training.builder import build_run, loop_settings
    from training.loggers import ConsoleLogger, CSVLogger, MultiLogger, TensorBoardLogger
    from training.loop import train

    parts = build_run(cfg)
    loggers = [ConsoleLogger(write=_console), CSVLogger(run_dir)]
    if cfg.logger.tensorboard:
        loggers.append(TensorBoardLogger(run_dir))
    logger = MultiLogger(loggers)
    try:
        summary = train(parts.agent, parts.buffer, parts.envs, parts.eval_env, loop_settings(cfg), logger)
    finally:
        logger.close()
        parts.close()
    with open(os.path.join(run_dir, "summary.json"), "w") as f:
        json.dump(summary, f, indent=2)
    return summary


def _console(line: str) -> None:
    from tqdm.auto import tqdm

    tqdm.write(line)
    sys.stdout.flush()  # visible at once when stdout goes to a file (cluster logs)


@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def main(cfg: DictConfig) -> float:
    run_dir = HydraConfig.get().runtime.output_dir
    try:
        OmegaConf.resolve(cfg)
        validate(cfg)  # before TensorFlow loads, so a typo fails in a second
        summary = run(cfg, run_dir)
    except (ConfigError, EnvConfigError) as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
    print(
        f"done: {summary['steps']} steps, final eval return {summary['final_return']:.2f}, "
        f"best {summary['best_return']:.2f}, {summary['steps_per_second']:.0f} steps/s; run dir {run_dir}"
    )
    return summary["final_return"]


if __name__ == "__main__":
    main()
