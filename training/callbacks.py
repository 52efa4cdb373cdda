"""Hydra callbacks (configured under `hydra.callbacks` in conf/config.yaml)."""
from __future__ import annotations

import os
import sys
import time
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf, open_dict

from training.config import override

_ABSENT = object()


def unknown_search_keys(params: Any, config: DictConfig) -> list[str]:
    """Keys of a sweep's search space (`hydra.sweeper.params`) that name nothing in the composed
    config. `+key` adds a key on purpose, and config groups (agent, env, ...) are nodes, so both pass."""
    missing = []
    for key in params or {}:
        key = str(key)
        if key.startswith(("+", "hydra.", "hydra/")) or "/" in key:
            continue
        if OmegaConf.select(config, key.lstrip("~"), default=_ABSENT, throw_on_missing=False) is _ABSENT:
            missing.append(key)
    return missing


class CheckSearchSpace(Callback):
    """Refuse a sweep whose search space names a key the config does not have, before any job runs.
    Without it the first job fails while composing, with a hint to add the key with `+`, which is
    the wrong fix for a misspelled search space."""

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        params = OmegaConf.select(config, "hydra.sweeper.params")
        missing = unknown_search_keys(params, config)
        if missing:  # Hydra turns a callback's exceptions into warnings, so exit here
            print(
                f"error: the sweep's search space (hydra.sweeper.params) names {', '.join(missing)}, which the "
                f"config of this run does not have (agent: {config.agent._target_}). Correct the key "
                f"(`python train.py agent=... --cfg job` prints the config), or use the preset that "
                f"matches the agent: hydra/sweeper=optuna_dqn for DQN, hydra/sweeper=optuna_td3 for TD3 and DDPG.",
                file=sys.stderr,
            )
            raise SystemExit(2)


def _launcher_is_remote(config: DictConfig) -> bool:
    """A launcher whose jobs write on other machines (Ray on AWS): the sweep directory is theirs."""
    return "aws" in str(OmegaConf.select(config, "hydra.launcher._target_", default="")).lower()


class CheckRunDirWritable(Callback):
    """Refuse a run whose output directory (hydra.run.dir; a sweep's hydra.sweep.dir) cannot be
    created and written, before Hydra tries: Hydra's own mkdir fails with a traceback. It creates
    the directory, as Hydra would next, and writes a test file there (root passes every permission
    check, so only a real write tells a read-only, full or impossible directory)."""

    def _check(self, key: str, path: str, default: str) -> None:
        from training.faults import write_problem

        if (problem := write_problem(path)) is not None:
            print(
                f"error: cannot write the run's output directory {key}={path}: {problem}. Give a directory "
                f"that can be created and written (e.g. {key}={default.split('/')[0]}/my_run), or leave {key} "
                f"out for the default {default} under the current directory.",
                file=sys.stderr,
            )
            raise SystemExit(2)

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        self._check("hydra.run.dir", str(config.hydra.run.dir), "outputs/<date>/<time>")

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        if not _launcher_is_remote(config):
            self._check("hydra.sweep.dir", str(config.hydra.sweep.dir), "multirun/<date>/<time>")


class RefuseExistingRunDir(Callback):
    """Refuse a run whose output directory already holds a run (its `.hydra/config.yaml`), before
    Hydra writes its own config over that run's: the saved config is what resume and evaluate.py
    rebuild the run from. `resume=auto` (the same job again, by hand or requeued) is let through."""

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        resume = OmegaConf.select(config, "resume", default=None)
        if resume == "auto":
            keep_added_settings(config)
            return
        run_dir = str(config.hydra.run.dir)
        if os.path.exists(os.path.join(run_dir, ".hydra", "config.yaml")):
            fix = (f"drop hydra.run.dir: {override('resume', resume)} continues in the run's own directory"
                   if resume is not None else f"continue that run with {override('resume', run_dir)}, or give this "
                   f"one a new directory")
            print(
                f"error: hydra.run.dir={run_dir} already holds a run (its .hydra/config.yaml), and starting "
                f"another there would overwrite that run's saved config; {fix}.",
                file=sys.stderr,
            )
            raise SystemExit(2)


def keep_added_settings(config: DictConfig) -> None:
    """`resume=auto` composes the job's config anew from today's defaults, and Hydra then writes it
    over the run's saved one: an agent setting added since that run saved its config
    (training.resume.ADDED_AGENT_SETTINGS) takes the value the run had, unless the command sets it."""
    from training.resume import settings_added_since

    saved = os.path.join(str(config.hydra.run.dir), ".hydra", "config.yaml")
    if not os.path.exists(saved):
        return
    given = {str(o).split("=", 1)[0].lstrip("+~") for o in OmegaConf.select(config, "hydra.overrides.task", default=[]) or []}
    run = OmegaConf.load(saved)
    if OmegaConf.select(run, "agent._target_") != OmegaConf.select(config, "agent._target_"):
        return  # not the agent the run saved: none of its settings to keep
    missing = {key: value for key, value in settings_added_since(run).items() if f"agent.{key}" not in given}
    if missing:
        with open_dict(config):
            config.agent.update(missing)


def failed_points(sweep_dir: str, since: float) -> list[tuple[str, str]]:
    """(run dir, error) of each job under `sweep_dir` that failed at or after `since` (time.time()):
    one that recorded its error (training.faults.FAILED) or whose summary says it diverged, in the
    order of their directories."""
    import json

    from training.faults import FAILED

    def read(path: str) -> dict:
        try:
            with open(path) as f:
                record = json.load(f)
            return record if isinstance(record, dict) else {}
        except (OSError, ValueError):
            return {}

    found = []
    for root, dirs, files in os.walk(sweep_dir):
        dirs[:] = sorted(d for d in dirs if d not in ("checkpoints", "tb", "wandb", ".submitit", ".hydra"))
        recent = {f for f in (FAILED, "summary.json") if f in files and os.path.getmtime(os.path.join(root, f)) >= since}
        if FAILED in recent:
            found.append((root, str(read(os.path.join(root, FAILED)).get("error", "its failed.json cannot be read"))))
        elif "summary.json" in recent and "diverged_at" in (summary := read(os.path.join(root, "summary.json"))):
            found.append((root, f"training diverged at step {summary['diverged_at']}"))
    return found


class ReportFailedPoints(Callback):
    """A sweep in which points failed (an error, or training that diverged) names them once every
    point has run, and exits with code 1. Each failed job recorded why in its directory and returned,
    so the points after it went on (train.py); without this a grid of points would exit 0 with
    points missing. A search (Optuna's sweeper) counts a failed trial as one of its results: there
    the report is a warning."""

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        self._started = time.time() - 1.0  # a file system's mtimes may be coarser than the clock

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        if _launcher_is_remote(config):
            return
        sweep_dir = str(config.hydra.sweep.dir)
        failed = failed_points(sweep_dir, getattr(self, "_started", 0.0))
        if not failed:
            return
        shown = "; ".join(f"{path}: {error}" for path, error in failed[:3])
        more = f"; and {len(failed) - 3} more" if len(failed) > 3 else ""
        what = f"{len(failed)} point{'s' if len(failed) > 1 else ''} of the sweep failed ({shown}{more})."
        if "optuna" in str(OmegaConf.select(config, "hydra.sweeper._target_", default="")).lower():
            print(f"warning: {what} The search counted them as failed trials.", file=sys.stderr)
            return
        print(f"error: {what} The other points ran; aggregate.py {sweep_dir} reports the failed ones and leaves them "
              f"out. Correct what the errors name and run the sweep again with resume=auto: it keeps the points that "
              f"finished.", file=sys.stderr)
        raise SystemExit(1)
