"""Train an off-policy agent. Hydra composes the run from conf/:

    python train.py                                  # TD3 on Pendulum-v1
    python train.py agent=td3 env=ant                # the reference TD3 setting on Ant-v5
    python train.py agent=ddpg env=halfcheetah network.hidden=[400,300] seed=3
    python train.py resume=outputs/2026-11-21/12-00-00 [total_steps=...]

Exit codes: 0 done; 2 bad input (a setting, a config choice, a run directory that cannot be
written), printed as one `error:` paragraph before anything trains; 3 the training diverged (a
loss or weight became NaN or infinite; the checkpoints before it are kept); 4 a write failed (a
full disk: the partial checkpoint is removed, and the message names the last whole one);
128+N stopped by signal N (a checkpoint was written; resume continues). In a sweep (-m) a job
that fails with 2, 3 or 4 records its error in its run dir (failed.json, or summary.json for a
diverged run) and the other jobs go on; aggregate.py reports it.
"""
from __future__ import annotations

import logging
import os
import shlex
import signal
import sys

from training.runtime import prepare_process

prepare_process()  # before TensorFlow or Keras is imported anywhere: Keras' backend, TF's log level
# Allocate GPU memory as needed rather than all of it up front, so the jobs of a sweep can share a GPU.
os.environ.setdefault("TF_FORCE_GPU_ALLOW_GROWTH", "true")
# Under `uv run`, Ray (hydra/launcher=ray, ray_cluster) would start each job's worker through `uv run`
# in an uploaded copy of this directory; its nodes run this project's environment already.
os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")

import hydra  # noqa: E402
from hydra.core.hydra_config import HydraConfig  # noqa: E402
from omegaconf import DictConfig, OmegaConf  # noqa: E402

from envs.factory import EnvConfigError  # noqa: E402
from training.config import ConfigError, override, validate, warnings  # noqa: E402
from training.faults import WRITE_FAULTS, Diverged, clear_failure, record_failure, write_failure, write_problem  # noqa: E402
from training.command_line import read_command_line  # noqa: E402
from training.resume import resume_config  # noqa: E402
from training.runlock import RunDirLock  # noqa: E402


def _console(line: str) -> None:
    from tqdm.auto import tqdm

    tqdm.write(line)
    sys.stdout.flush()  # visible at once when stdout goes to a file (cluster logs)


# an absolute path: the same conf/ when train.py runs as a script and when its `main` is imported
@hydra.main(version_base="1.3", config_path=os.path.join(os.path.dirname(os.path.abspath(__file__)), "conf"),
            config_name="config")
def main(cfg: DictConfig) -> float:
    logging.getLogger("absl").setLevel(logging.WARNING)  # TF's checkpoint INFO lines
    run_dir = hydra_dir = HydraConfig.get().runtime.output_dir
    try:
        return _train(cfg, run_dir)
    finally:
        _remove_if_empty(hydra_dir)


def _remove_if_empty(path: str) -> None:
    """Remove a single run's directory that Hydra made and nothing used: a command refused before
    training, or resume (which continues in the run's own directory). It holds only .hydra/ and an
    empty train.log; anything else in it is kept."""
    import shutil

    if HydraConfig.get().mode.name != "RUN" or not os.path.isdir(path):
        return
    log = os.path.join(path, "train.log")
    if set(os.listdir(path)) <= {".hydra", "train.log"} and (not os.path.exists(log) or os.path.getsize(log) == 0):
        shutil.rmtree(path, ignore_errors=True)


def _train(cfg: DictConfig, run_dir: str) -> float:
    from training.checkpoints import CheckpointError, CheckpointWriteError, last_checkpoint, list_checkpoints

    try:
        if cfg.resume == "auto" or (cfg.resume is None and _cluster_job()):
            # The same job again (requeued by the cluster, or rerun with resume=auto): continue
            # from its own last checkpoint if it wrote one, else start it.
            resume = bool(list_checkpoints(run_dir))
            if resume and (done := _finished(run_dir, int(cfg.total_steps))) is not None:
                # a job of a sweep run again whole (resume=auto): nothing left to do
                print(f"already finished: {done['steps']} steps in {run_dir} (total_steps={cfg.total_steps}); "
                      f"to extend it: python train.py {override('resume', run_dir)} total_steps={2 * done['steps']}")
                return done.get("final_return", float("nan"))
        elif cfg.resume is not None:
            run_dir = os.path.abspath(str(cfg.resume))
            cfg = resume_config(run_dir, list(HydraConfig.get().overrides.task))
            if (problem := write_problem(run_dir)) is not None:
                raise ConfigError(
                    f"cannot write in the run directory {run_dir}: {problem}; resume continues the run in "
                    f"its own directory. Make it writable, or copy the run to a disk you can write "
                    f"(cp -r {shlex.quote(run_dir)} NEW_DIR) and resume the copy: python train.py resume=NEW_DIR"
                )
            resume = True
        else:
            resume = False
        with RunDirLock(run_dir):  # first: a second writer is refused in a second, before TensorFlow loads
            summary = _run(cfg, run_dir, resume)
    except (ConfigError, EnvConfigError, CheckpointError) as err:
        return _failed(str(err), 2)
    except Diverged as err:
        print(f"error: {err}. {_diverged_fix(cfg, run_dir)}", file=sys.stderr, flush=True)
        if HydraConfig.get().mode.name == "MULTIRUN":
            return float("nan")  # a sweep's trial that failed, as a diverged run has always returned; the sweep goes on
        sys.exit(3)
    except CheckpointWriteError as err:
        return _failed(str(err), 4)
    except OSError as err:
        if err.errno not in WRITE_FAULTS:
            raise
        return _failed(write_failure(err, run_dir, last_checkpoint(run_dir)), 4)
    if summary["stopped"]:
        name = signal.Signals(summary["signal"]).name
        print(f"stopped by {name} at step {summary['steps']}; checkpoint written. Continue with:\n"
              f"  python train.py {override('resume', run_dir)}", flush=True)
        sys.exit(128 + summary["signal"])
    print(
        f"done: {summary['steps']} steps, final eval return {summary['final_return']:.2f}, "
        f"best {summary['best_return']:.2f}, {summary['steps_per_second']:.0f} steps/s; run dir {run_dir}\n"
        f"  results:     {os.path.join(run_dir, 'summary.json')}, eval.csv, train.csv\n"
        f"  evaluate:    python evaluate.py {override('run_dir', run_dir)} [checkpoint=best] [video=true] [export=true]\n"
        f"  extend:      python train.py {override('resume', run_dir)} total_steps={2 * summary['steps']}\n"
        f"  TensorBoard: tensorboard --logdir {shlex.quote(os.path.join(run_dir, 'tb'))}"
    )
    return summary["final_return"]


def _failed(message: str, exit_code: int) -> float:
    """A run that failed: a single run exits with `exit_code`. A job of a sweep records the error in
    its directory (failed.json, which aggregate.py reports) and returns NaN, so the sweep's other
    points go on: a bad value in one point must not end the jobs after it."""
    print(f"error: {message}", file=sys.stderr, flush=True)
    if HydraConfig.get().mode.name != "MULTIRUN":
        sys.exit(exit_code)
    record_failure(HydraConfig.get().runtime.output_dir, message, exit_code)
    return float("nan")


def _run(cfg: DictConfig, run_dir: str, resume: bool) -> dict:
    OmegaConf.resolve(cfg)
    validate(cfg)  # before TensorFlow loads, so a typo fails in a second
    clear_failure(run_dir)
    for warning in warnings(cfg):
        print(f"warning: {warning}", file=sys.stderr)
    from training.runner import run_training

    return run_training(cfg, run_dir, resume=resume, console=_console)


def _diverged_fix(cfg: DictConfig, run_dir: str) -> str:
    """What to do about a run that diverged: the checkpoints it kept, and the settings to change."""
    from training.checkpoints import list_checkpoints

    kept = [f"step_{step:010d}" for step in list_checkpoints(run_dir)]
    if os.path.exists(os.path.join(run_dir, "checkpoints", "best", "meta.json")):
        kept.append("best")
    kept = (f"The run stopped there; the checkpoints it wrote before ({', '.join(kept)} in {run_dir}/checkpoints) "
            f"are kept, and none holds the diverged weights." if kept else "The run stopped there, before it wrote a checkpoint.")
    rates = " ".join(f"agent.{k}={v:g}" if isinstance(v, float) else f"agent.{k}={v}"
                     for k, v in cfg.agent.items() if str(k).endswith("lr"))
    return (f"{kept} Start a new run with lower learning rates (this one had {rates or 'the defaults'}), "
            f"or check the scale of the env's rewards and observations: large or unnormalised ones blow up "
            f"the updates (scale them with a wrapper).")


def _finished(run_dir: str, total_steps: int) -> dict | None:
    """The summary of the run in `run_dir` if it finished `total_steps` (not stopped, not diverged)."""
    import json

    try:
        with open(os.path.join(run_dir, "summary.json")) as f:
            summary = json.load(f)
    except (OSError, ValueError):
        return None
    done = isinstance(summary, dict) and not summary.get("stopped") and "diverged_at" not in summary
    return summary if done and int(summary.get("steps", -1)) >= total_steps else None


def _cluster_job() -> bool:
    """A job of a cluster launcher: submitit's (SLURM, or its local executor) or a Ray task. When the
    cluster starts it again (SLURM's requeue, Ray's retry after the job's node died), it finds its
    own checkpoints."""
    if HydraConfig.get().mode.name != "MULTIRUN":
        return False
    ray = sys.modules.get("ray")  # imported in a Ray worker before it runs the job
    return bool(os.environ.get("SUBMITIT_EXECUTOR")) or (ray is not None and ray.is_initialized())


if __name__ == "__main__":
    try:
        sys.argv[1:] = read_command_line(sys.argv[1:])
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
    main()
