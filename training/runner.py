"""One training run from a composed config: build, restore, train, checkpoint, log, stop cleanly.

train.py calls `run_training`; tests call it in-process. Everything here is wiring: the loop is
in loop.py, the maths in agents/.
"""
from __future__ import annotations

import dataclasses
import json
import os
import random
from typing import Callable

from omegaconf import DictConfig

from training.builder import build_run, describe
from training.checkpoints import CheckpointError, Checkpointer, list_checkpoints, resolve_checkpoint
from training.config import ConfigError, override
from training.families import family_of
from training.faults import Diverged, check_finite
from training.loggers import CSVLogger, MultiLogger
from training.provenance import provenance
from training.resume import hydra_record, run_identity
from training.run_logging import make_logger
from training.runlock import RunDirLock
from training.session import LoopHooks
from training.speed import Speed
from training.stopping import StopSignal


def run_line(cfg: DictConfig, run_dir: str, resume: bool) -> str:
    """The run's first line: what trains where, with which speed preset."""
    identity = run_identity(cfg, run_dir)
    choices, _ = hydra_record(run_dir)
    speed = choices.get("speed") or "as saved"
    return (f"{'resuming' if resume else 'training'} {identity['agent']} on {cfg.env.id}, seed {identity['seed']}, "
            f"{int(cfg.total_steps)} env steps, speed={speed}; run dir {run_dir}")


def set_aside_summary(run_dir: str) -> None:
    """A finished run that is extended is unfinished again: its summary.json moves to
    summary_<steps>.json, kept, and a new one is written when the run finishes. So a run that
    stops or crashes while extended never shows a stale summary as if it had finished."""
    path = os.path.join(run_dir, "summary.json")
    if not os.path.exists(path):
        return
    try:
        with open(path) as f:
            steps = int(json.load(f)["steps"])
    except (OSError, ValueError, KeyError, TypeError):
        steps = "earlier"
    os.replace(path, os.path.join(run_dir, f"summary_{steps}.json"))


def speed_settings(speed: Speed) -> dict:
    """What the `auto` speed settings decided in this process: the compile mode, batch shards, env
    steps per compiled call, and TF's thread pools (0: TF's default size)."""
    import tensorflow as tf

    return {
        "compile": speed.compile,
        "batch_shards": speed.batch_shards,
        "steps_per_call": speed.steps_per_call,
        "inter_op_threads": tf.config.threading.get_inter_op_parallelism_threads(),
        "intra_op_threads": tf.config.threading.get_intra_op_parallelism_threads(),
    }


def agent_variables(agent) -> dict:
    """The variables a checkpoint of `agent` holds (networks, targets, optimizer state, counters),
    by name."""
    found = {}
    for key, obj in agent.trackables().items():
        variables = [obj] if hasattr(obj, "assign") else list(getattr(obj, "variables", None) or [])
        for v in variables:
            found[f"{key}:{getattr(v, 'path', None) or v.name}"] = v
    return found


def loop_state_of(saved, cls, path: str):
    """The loop's state `cls` (LoopState, EvolutionState) from a checkpoint's plain record of its fields."""
    fields = {f.name for f in dataclasses.fields(cls)}
    if not isinstance(saved, dict) or not set(saved) <= fields:
        raise CheckpointError(f"checkpoint {path} holds a loop state with fields this run does not have "
                              f"({sorted(set(saved) - fields) if isinstance(saved, dict) else type(saved).__name__}); "
                              f"resume it with the version of this project that wrote it.")
    return cls(**saved)


def restore_latest(run_dir: str, checkpointer: Checkpointer, parts, total_steps: int, with_buffer: bool, state_type):
    """Restore the run's latest checkpoint into the learner and the run's generators; refuse one
    that already finished `total_steps`. Returns (its path, the saved record with its loop state
    as `state_type`, the buffer's arrays)."""
    path = resolve_checkpoint(run_dir, "latest")
    saved, buffer_state = checkpointer.restore(path, with_buffer=with_buffer)
    saved["loop"] = loop_state_of(saved["loop"], state_type, path)
    step = saved["loop"].step
    if step >= total_steps and os.path.exists(os.path.join(run_dir, "summary.json")):
        raise ConfigError(
            f"the run in {run_dir} already reached {step} steps (total_steps={total_steps}); "
            f"to extend it pass a larger total, e.g. total_steps={2 * step}."
        )
    parts.learner.refresh()
    parts.rng.bit_generator.state = saved["numpy_rng"]
    random.setstate(saved["python_rng"])
    return path, saved, buffer_state


def run_training(cfg: DictConfig, run_dir: str, resume: bool = False, console: Callable[[str], None] = print) -> dict:
    """Train (or, with `resume`, continue) the run in `run_dir`, as its only writer (RunDirLock)."""
    with RunDirLock(run_dir):
        return _run_training(cfg, run_dir, resume, console)


def _run_training(cfg: DictConfig, run_dir: str, resume: bool, console: Callable[[str], None]) -> dict:
    if not resume and list_checkpoints(run_dir):
        raise ConfigError(
            f"{run_dir} already holds checkpoints of a run; a new run there would prune them. "
            f"Continue it with {override('resume', run_dir)}, or start the new run in another directory."
        )
    parts = build_run(cfg)
    console(run_line(cfg, run_dir, resume))
    learner, family = parts.learner, family_of(cfg, parts)
    speed = speed_settings(parts.speed)
    checkpointer = Checkpointer(run_dir, learner.trackables(), keep=int(cfg.checkpoint.keep), describe=describe(cfg))
    console(family.describe(speed))

    csv_logger = CSVLogger(run_dir)
    if resume:
        path, saved, buffer_state = restore_latest(run_dir, checkpointer, parts, parts.settings.total_steps,
                                                   with_buffer=True, state_type=family.state_type)
        state = saved["loop"]
        family.restore(state, saved, buffer_state, path, console)
        del buffer_state  # maps of the checkpoint's file: release them once copied
        set_aside_summary(run_dir)  # only once all of the checkpoint was taken: a refused one changes no file
        for kind in family.stepped_records:
            csv_logger.truncate(kind, max_step=state.step)
        csv_logger.truncate("eval", max_rows=len(state.evals))
        console(f"resumed {run_dir} from {os.path.basename(path)} at {family.position(state)}")
    else:
        # A fresh start; in a directory that has records but no checkpoint (resume=auto after an
        # attempt killed before its first one), those records are of steps this run logs again.
        for kind in (*family.stepped_records, "eval"):
            csv_logger.truncate(kind, max_rows=0)
        state = family.initial_state()
    logger = make_logger(cfg, run_dir, console, speed, csv_logger, learner)

    def checkpoint(st, kind: str) -> None:
        if kind == "best" and not cfg.checkpoint.best:
            return
        # never a checkpoint of diverged weights: the loop checks the metrics it logs, and this
        # costs one pass over the weights, small next to writing them
        check_finite(agent_variables(learner), st.step, family.weights)
        saved = {
            "loop": dataclasses.asdict(st),
            "numpy_rng": parts.rng.bit_generator.state,
            "python_rng": random.getstate(),
            "envs": family.envs_state(),
        }
        buffer_state = family.buffer_state() if cfg.checkpoint.buffer and kind != "best" else None
        checkpointer.save(st.step, saved, buffer_state, best=(kind == "best"))

    return drive(cfg, run_dir, parts, logger, speed, lambda stop_requested: family.train(
        logger, state, LoopHooks(checkpoint=checkpoint, stop_requested=stop_requested)))


def drive(cfg: DictConfig, run_dir: str, parts, logger: MultiLogger, speed: dict, loop: Callable[[Callable], dict]) -> dict:
    """Run `loop(stop_requested)` (a family's loop) under the stop signals, close the loggers and
    envs, and write summary.json: the loop's summary, or a diverged run's record."""
    try:
        with StopSignal() as stop:
            summary = loop(stop.requested)
            summary["signal"] = stop.signum
    except Diverged as err:
        # what aggregate.py reads to count the run as diverged, not as an unfinished one
        _close(logger, parts)
        write_summary(run_dir, {"steps": err.step, "diverged_at": err.step, "stopped": False, "final_return": float("nan"),
                                "run_dir": run_dir, **run_identity(cfg, run_dir), **speed, **provenance()})
        raise
    except BaseException:
        _close(logger, parts)  # a second error while closing (the same full disk) must not hide the first
        raise
    _close(logger, parts, quiet=False)
    if summary["stopped"]:  # a signal at the very end found the run finished: nothing to hand over
        stop.hand_over(summary["steps"])
    summary["run_dir"] = run_dir
    summary.update(run_identity(cfg, run_dir))
    summary.update(speed)  # what `auto` decided on this machine
    summary.update(provenance())  # the commit and library versions that made it
    if not summary["stopped"]:
        write_summary(run_dir, summary)
    return summary


def write_summary(run_dir: str, summary: dict) -> None:
    with open(os.path.join(run_dir, "summary.json"), "w") as f:
        json.dump(summary, f, indent=2)


def _close(logger, parts, quiet: bool = True) -> None:
    """Close the loggers and the envs; `quiet`: an error in doing so is dropped (another is being raised)."""
    for close in (logger.close, parts.close):
        try:
            close()
        except Exception:
            if not quiet:
                raise
