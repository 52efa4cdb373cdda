"""The learning comparisons that take many CPU-hours, declared as studies:
each study is a list of runs (tfrl's train.py or Stable-Baselines3's sb3_learning.py, one command
each; or the MR.Q author's code through mrq_reference.py), run one after another. When a run completes, its record (`.hydra/`, `eval.csv`, `train.csv` and
`summary.json`: what aggregate.py reads, a few KB) is kept in
`labs/<study>/runs/<run>/`, so a study can be finished over several sittings on
several machines and its table and plots rebuilt from the repo alone.

    uv run python benchmarks/studies.py list                      # every study, which runs are kept
    uv run python benchmarks/studies.py run minatar_dqn --runs-dir /tmp/studies [--only NAME ...]
    uv run python benchmarks/studies.py aggregate minatar_dqn     # -> labs/minatar_dqn/

`run` runs the runs not yet kept, in the order listed (a run's command has `resume=auto`: stopped
and started again on the same machine, it continues from its last checkpoint). A run is kept when
it completes or diverges (a diverged run is a result); a kept run whose recorded overrides are not
the study's declared ones (its budget changed) counts as pending. `aggregate` passes any further
arguments to aggregate.py (`--last 5`). SB3's runs need its
venv (`bash benchmarks/setup_sb3.sh`), the MR.Q author's runs that venv and the author's files
(`bash benchmarks/setup_author.sh mrq`). Each run uses one thread on each side, so two `run`s with
disjoint `--only` lists fill a two-core machine.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LEARNING = os.path.join(ROOT, "labs")  # labs/<study>/: its aggregate; labs/<study>/runs/: its kept runs
SB3_PYTHON = os.path.join(ROOT, "benchmarks", ".venv-sb3", "bin", "python")
RECORD = ("eval.csv", "summary.json")  # with .hydra/: what analysis/runs.py reads of a run
TRAINING = "train.csv"  # kept too where the run wrote it: the training episodes' returns (CleanRL reports those)
DIVERGED = 3  # train.py's exit code for a run stopped on a non-finite loss: its summary is a result

ONE_THREAD = {"tfrl": ["speed.threads.inter_op=1", "speed.threads.intra_op=1", "speed.batch_shards=1"],
              "sb3": ["sb3.threads=1"], "author": ["mrq_author.threads=1"]}
SCRIPTS = {"tfrl": (sys.executable, "train.py"), "sb3": (SB3_PYTHON, "benchmarks/sb3_learning.py"),
           "author": (SB3_PYTHON, "benchmarks/mrq_reference.py")}
# each side's own saves, so a run stopped with its sitting continues from them (a run killed
# outright, with its machine, from the last of them)
CHECKPOINTS = {"tfrl": ["checkpoint.every=10000"], "sb3": ["sb3.checkpoint_every=50000"],
               "author": ["mrq_author.checkpoint_every=10000"]}


@dataclass(frozen=True)
class Run:
    name: str
    implementation: str  # tfrl | sb3 | author (the MR.Q author's code)
    overrides: tuple[str, ...]

    def command(self, run_dir: str) -> list[str]:
        return [*SCRIPTS[self.implementation], *self.overrides, *ONE_THREAD[self.implementation],
                *CHECKPOINTS[self.implementation], "resume=auto", f"hydra.run.dir={run_dir}"]


def grid(implementations: list[str], agent: str, tasks: list[tuple[str, list[str]]], seeds: range,
         common: list[str]) -> list[Run]:
    """Every implementation x task x seed, seed-major so that a partly run study has whole seeds."""
    return [Run(f"{impl}_{agent}_{task}_s{seed}", impl, (f"agent={agent}", *task_overrides, *common, f"seed={seed}"))
            for seed in seeds for task, task_overrides in tasks for impl in implementations]


def by_seed(runs: list[Run]) -> list[Run]:
    """Several grids' runs seed-major (the order within a seed kept)."""
    return sorted(runs, key=lambda run: int(run.name.rsplit("_s", 1)[1]))


DMC_TASKS = [("cheetah_run", ["env=dmc", "env.domain=cheetah", "env.task=run"]),
             ("walker_walk", ["env=dmc", "env.domain=walker", "env.task=walk"])]

GYM_TASKS = [("hopper", ["env=hopper"]), ("halfcheetah", ["env=halfcheetah"])]

STUDIES: dict[str, tuple[str, list[Run]]] = {
    "minatar_dqn": (
        "DQN on two MinAtar games, tfrl against SB3, the MinAtar paper's settings (conf/tuned/dqn_minatar.yaml)",
        grid(["tfrl", "sb3"], "dqn",
             [(game, ["env=minatar", f"env.game={game}"]) for game in ("breakout", "space_invaders")],
             range(3), ["total_steps=500000", "eval_every=25000"])),
    "atari_dqn": (
        "DQN on Breakout, tfrl against SB3 (the RL Zoo's settings, conf/tuned/dqn_atari.yaml), at a budget a CPU "
        "fits: 150k env steps (600k frames), learning from 20k, epsilon 1 -> 0.01 over the next 100k",
        grid(["tfrl", "sb3"], "dqn", [("breakout", ["env=atari", "env.game=Breakout"])], range(3),
             ["total_steps=150000", "learning_starts=20000", "agent.eps_start=1.0", "agent.eps_decay_steps=100000",
              "eval_every=25000"])),
    "dmc_sac_td7": (
        "SAC (tfrl and SB3) and TD7 (tfrl) on two DMC tasks from states, 100k steps (tfrl's SAC runs kept here "
        "predate agent.tanh_epsilon: the exact tanh correction; a seed added to them needs agent.tanh_epsilon=0)",
        grid(["tfrl", "sb3"], "sac", DMC_TASKS, range(3), ["total_steps=100000"])
        + grid(["tfrl"], "td7", DMC_TASKS, range(3), ["total_steps=100000"])),
    "mrq_gym": (
        "MR.Q (tfrl and the author's code) and tfrl's TD7, CrossQ and SAC on Hopper-v5 and HalfCheetah-v5, 100k "
        "steps: the reference check of agent=mrq, and whether it is the best single choice here",
        by_seed(grid(["tfrl", "author"], "mrq", GYM_TASKS, range(3), ["total_steps=100000"])
                + [run for agent in ("td7", "crossq", "sac")
                   for run in grid(["tfrl"], agent, GYM_TASKS, range(3), ["total_steps=100000"])])),
    "mrq_dmc": (
        "MR.Q (tfrl) on DMC walker-walk and cheetah-run from states, conf/tuned/mrq_dmc.yaml (the author's action "
        "repeat of 2, an evaluation every 5k), 50k agent steps (100k frames), beside the author's published 10 seeds "
        "(facebookresearch/MRQ results/dmc_results.txt); and agent.encoder_schedule=fused against the author's "
        "schedule on walker-walk; and the author's code on walker-walk, the referee where tfrl's runs leave the band",
        grid(["tfrl"], "mrq", [DMC_TASKS[1]], range(3), ["total_steps=50000"])
        + grid(["tfrl"], "mrq", [("walker_walk_fused", [*DMC_TASKS[1][1], "agent.encoder_schedule=fused"])], range(3),
               ["total_steps=50000"])
        + grid(["tfrl"], "mrq", [DMC_TASKS[0]], range(3), ["total_steps=50000"])
        + grid(["author"], "mrq", [DMC_TASKS[1]], range(3), ["total_steps=50000"])),
    "ppo_cleanrl": (
        "PPO (tfrl) with CleanRL's recipes beside CleanRL's published 3 seeds (docs/benchmark/ppo_continuous_action.md "
        "and ppo.md, tag pr-424): HalfCheetah-v4, Hopper-v4 and Walker2d-v4 at 1M steps (1442.6 +- 46.0, 2382.9 +- "
        "271.7, 2288.0 +- 571.8) and CartPole-v1 at 500k (490.0 +- 6.1); CleanRL's figures are training episodes' "
        "returns, logged here as train.csv's episode_return beside the evaluations",
        by_seed(grid(["tfrl"], "ppo", [(f"{name.lower()}_v4", [f"env={name.lower()}", f"env.id={name}-v4"])
                                      for name in ("HalfCheetah", "Hopper", "Walker2d")], range(3),
                     ["total_steps=1000000", "eval_every=100000"])
                + grid(["tfrl"], "ppo", [("cartpole", ["env=cartpole"])], range(3),
                       ["total_steps=500000", "eval_every=50000"]))),
    "drq_dmc": (
        "DR.Q (tfrl, conf/tuned/drq_dmc.yaml) on DMC cheetah-run and walker-walk from states, 50k agent steps (100k "
        "frames), beside the authors' published 10 seeds (dmksjfl/DR.Q results/drq.csv: `published.py --results "
        "benchmarks/.drq-ref/drq.csv --frames-per-step 2`)",
        grid(["tfrl"], "drq", DMC_TASKS, range(3), ["total_steps=50000"])),
    "ppo_sb3": (
        "SB3's PPO (agent=ppo_sb3), tfrl against SB3 itself, both with the RL Zoo's tuned Hopper settings "
        "(conf/tuned/ppo_sb3_hopper.yaml: 512-step rollouts, 5 epochs of 16 minibatches, VecNormalize, PyTorch's "
        "init, log-std from -2) on Hopper-v4, 1M steps",
        grid(["tfrl", "sb3"], "ppo_sb3", [("hopper_v4", ["env=hopper", "env.id=Hopper-v4"])], range(3),
             ["total_steps=1000000", "eval_every=50000"])),
}


def kept_dir(study: str, run: Run) -> str:
    return os.path.join(LEARNING, study, "runs", run.name)


def is_kept(study: str, run: Run) -> bool:
    """Kept, complete, and run with the overrides the study declares today (a study whose budget
    changed runs its runs again)."""
    path = kept_dir(study, run)
    if not completed(path):
        return False
    try:
        with open(os.path.join(path, ".hydra", "overrides.yaml")) as f:
            recorded = {line[2:].strip() for line in f if line.startswith("- ")}
    except OSError:
        return False
    return set(run.overrides) <= recorded


def completed(run_dir: str) -> bool:
    """A run that wrote its summary without being stopped: finished, or diverged (a result too)."""
    try:
        with open(os.path.join(run_dir, "summary.json")) as f:
            return not json.load(f).get("stopped", False)
    except (OSError, ValueError):
        return False


def keep(run_dir: str, dest: str) -> None:
    """Copy a completed run's record into the repo: into a hidden temp dir first (aggregate.py
    skips dot dirs), so a kept run is whole and an interrupted copy is never read as a run."""
    parent, name = os.path.split(dest)
    tmp, old = os.path.join(parent, f".{name}.tmp"), os.path.join(parent, f".{name}.old")
    for path in (tmp, old):
        shutil.rmtree(path, ignore_errors=True)
    shutil.copytree(os.path.join(run_dir, ".hydra"), os.path.join(tmp, ".hydra"))
    for record in RECORD:
        shutil.copy2(os.path.join(run_dir, record), tmp)
    if os.path.exists(os.path.join(run_dir, TRAINING)):
        shutil.copy2(os.path.join(run_dir, TRAINING), tmp)
    if os.path.exists(dest):
        os.replace(dest, old)
    os.replace(tmp, dest)
    shutil.rmtree(old, ignore_errors=True)


def select(study: str, only: list[str] | None) -> list[Run]:
    runs = STUDIES[study][1]
    unknown = sorted(set(only or ()) - {r.name for r in runs})
    if unknown:
        sys.exit(f"error: no run named {', '.join(unknown)} in study {study}; "
                 f"`python benchmarks/studies.py list` names them.")
    return [r for r in runs if not only or r.name in only]


def run_study(study: str, runs_dir: str, only: list[str] | None) -> int:
    failed = []
    for run in select(study, only):
        if is_kept(study, run):
            continue
        run_dir = os.path.join(os.path.abspath(runs_dir), study, run.name)
        code = 0
        if not completed(run_dir):  # one that completed here but was not kept is kept, not run again
            print(f"[{study}] {run.name}: {' '.join(run.command(run_dir))}", flush=True)
            code = subprocess.call(run.command(run_dir), cwd=ROOT)
        if code in (0, DIVERGED) and completed(run_dir):
            keep(run_dir, kept_dir(study, run))
            print(f"[{study}] {run.name}: kept in {os.path.relpath(kept_dir(study, run), ROOT)}", flush=True)
        else:
            failed.append(run.name)
            print(f"[{study}] {run.name}: exit {code}, not kept", flush=True)
    if failed:
        print(f"error: {len(failed)} run(s) of {study} did not complete: {', '.join(failed)}; their output "
              f"is under {runs_dir}. The same command continues them.", file=sys.stderr)
    return 1 if failed else 0


def list_studies() -> int:
    for study, (what, runs) in STUDIES.items():
        done = [r.name for r in runs if is_kept(study, r)]
        print(f"{study}: {what}\n  kept {len(done)} of {len(runs)}")
        for r in runs:
            print(f"  {'kept   ' if r.name in done else 'pending'} {r.name}")
    return 0


def aggregate_study(study: str, extra: list[str]) -> int:
    runs = os.path.join(LEARNING, study, "runs")
    # Only a study with more than one implementation has runs that carry the key.
    by = ["--by", "implementation=tfrl"] if len({run.implementation for run in STUDIES[study][1]}) > 1 else []
    return subprocess.call([sys.executable, "aggregate.py", runs, *by, "--out", os.path.join(LEARNING, study),
                            *extra], cwd=ROOT)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="every study and which of its runs are kept")
    run = sub.add_parser("run", help="run a study's runs that are not kept yet, keeping each as it completes")
    run.add_argument("study", choices=STUDIES)
    run.add_argument("--runs-dir", required=True, help="where the runs' own dirs go (checkpoints included)")
    run.add_argument("--only", nargs="+", metavar="NAME", help="only these runs (names as `list` prints them)")
    agg = sub.add_parser("aggregate", help="aggregate.py over a study's kept runs, into labs/<study>/")
    agg.add_argument("study", choices=STUDIES)
    args, extra = parser.parse_known_args(argv)
    if extra and args.command != "aggregate":
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    if args.command == "list":
        return list_studies()
    if args.command == "run":
        return run_study(args.study, args.runs_dir, args.only)
    return aggregate_study(args.study, extra)


if __name__ == "__main__":
    sys.exit(main())
