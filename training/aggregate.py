"""Aggregate the runs of one or more seed sweeps: tables, learning curves and performance profiles
with the interval estimates of rliable (Agarwal et al. 2021, "Deep Reinforcement Learning at the
Edge of the Statistical Precipice").

    python aggregate.py multirun/2026-11-21/12-00-00 [more sweep or run dirs] [--by buffer] [--out DIR]

Runs. Every directory holding `.hydra/config.yaml` under the given paths is a run (the search does
not descend into a run). A run's learning curve is the `return_mean` column of its `eval.csv`. Its
score, which every table, profile and probability below is of, is its final return (its last
evaluation), or with `--last K` the mean of its last K evaluations, so that a policy whose return
dips from one evaluation to the next (DQN's greedy policy often does) is not judged by one
evaluation; a run with fewer than K evaluations is scored over all it has, and noted.
Runs are grouped by agent x env (the Hydra config group choices in `.hydra/hydra.yaml`) and by any
`--by` keys. A `--by` value comes, in this order, from
the config group choices (`buffer`, `network`, ...), the run's overrides (`agent.tau=0.01`), or the
saved config by dotted key (`agent.tau`); a run with none of these shows the key as unset, or as
the value `--by key=value` gives the runs that lack the key (runs from before the key existed,
or train.py's runs beside benchmarks/sb3_learning.py's: `--by implementation=tfrl`).

Statistics (all over runs, never over the episodes inside one evaluation):
- IQM, the interquartile mean: the mean of the middle 50% of the scores, i.e.
  `scipy.stats.trim_mean(x, 0.25)`: floor(n/4) scores are cut from each end, so for n < 4 it is
  the plain mean.
- Confidence intervals: 95% percentile intervals of the stratified bootstrap. Each replicate
  resamples the runs of every task (stratum) with replacement, independently per task, and
  recomputes the statistic; the interval is the 2.5th and 97.5th percentile of the replicates
  (rliable uses 50000 replicates; the default here is 10000, `--reps`, with which an endpoint moves
  by under 1% of the interval's width from one `--seed` to another, against up to 2% at 2000
  (`benchmarks/bootstrap_noise.py`); pass `--reps 50000` for numbers to publish). A row of the table is a
  single task, so its CI is the plain bootstrap over that group's runs. Each interval draws from its
  own generator seeded with (`--seed`, a hash of what it estimates), so the output is reproducible
  and one group's interval does not change when other runs join the aggregation.
- Learning curves (one PNG per env): the IQM over runs of the eval return at each eval step, with
  the 95% bootstrap CI band (none for a single run); a replicate resamples whole runs (the same
  runs at every step; rliable draws the runs of each step apart, which gives each step the same
  band). The curve of a group is solid over the eval steps that all its runs have. When runs end at
  different steps (incomplete runs), it goes on dashed past the last evaluation every run reached,
  with a lighter band, over the runs that went on, as long as at least 2 of them remain: the IQM
  of fewer runs is a different estimate and may jump where a run drops out, so it is drawn apart.
  The notes say where a curve turns dashed, over how many runs, and which steps are not drawn.
- Performance profile (one PNG over all envs): for every group without the env (e.g. each agent),
  the run-score distribution F(tau) = mean over envs of the fraction of the group's runs whose
  normalized score exceeds tau (with equal runs per env this is the fraction of all runs),
  with a 95% stratified-bootstrap band (none when every env has one run). There are no reference
  scores, so scores are min-max normalized per env over the scores of all runs of that env
  in this aggregation: (R - min) / (max - min). They are relative to these runs only; an env where
  every run has the same score has no range, so it is left out (and noted). The same
  normalization gives the "across envs" table: the
  mean (mean over envs of the per-env means, rliable's aggregate mean) and the IQM of the pooled
  normalized runs (rliable's aggregate IQM), with stratified-bootstrap CIs.
- Probability of improvement (rliable's P(X > Y)), for every pair of groups without the env: the
  mean over the envs both have of the probability that a run of X ends above a run of Y (ties
  count half), on the raw scores, so no normalization is involved. Its CI comes from the
  stratified bootstrap with X's and Y's runs resampled independently within each env.

What is not clean is reported, never dropped silently: runs without summary.json, or with one older
than their last evaluation (stopped, crashed, resumed or still running) count with their last
evaluation and are listed as incomplete (with `--complete-only` they are left out and listed as
skipped); a run whose evaluation return became NaN or infinite, or that train.py stopped on a
NaN or infinite loss (summary.json's `diverged_at`), diverged: it has no score,
so it is left out of the statistics and counted next to its group's runs ("+k diverged"). A CI
needs two runs (one run gets none), and with fewer than 5 the notes say it is too narrow.
Unreadable eval.csv rows and a last row
cut off mid-write are left out and listed; groups whose
runs end at different steps are listed with the steps; runs with no or an empty eval.csv are
listed as skipped with the reason; runs of a group that differ in overrides other than the seed
are noted. Input that cannot be aggregated raises AggregateError: a missing path, a directory
without runs, a group whose runs use different agent classes or env ids under one name, and a
`--by` key no run has.
"""
from __future__ import annotations

import csv
import json
import math
import os
import re
import zlib
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np
from omegaconf import DictConfig, ListConfig, OmegaConf

from training.resume import env_label, hydra_record

CONFIDENCE = 0.95
DEFAULT_REPS = 10000  # bootstrap replicates (rliable: 50000)
TAUS = np.linspace(0.0, 1.0, 101)  # thresholds of the performance profile (normalized scores)
# Overrides that do not change what a run learns; a group whose runs differ only in these is not noted.
_NEUTRAL_OVERRIDES = ("seed", "progress", "log_every", "logger", "wandb", "checkpoint_every", "checkpoint_keep",
                      "save_buffer", "save_best", "resume", "hydra", "compile", "vectorization")
_UNSET = "(unset)"
_MISSING = object()


class AggregateError(Exception):
    """Input that cannot be aggregated; the message names the problem and the fix."""


# ----------------------------------------------------------------------------------------------
# Statistics: small pure functions.


def iqm(scores, axis: int | None = 0):
    """Interquartile mean, exactly `scipy.stats.trim_mean(scores, 0.25, axis)`: the mean of the
    scores left after cutting floor(n/4) from each end along `axis` (None: all scores)."""
    a = np.asarray(scores)
    if a.size == 0:
        return np.nan
    if axis is None:
        a, axis = a.ravel(), 0
    n = a.shape[axis]
    low = int(0.25 * n)
    high = n - low
    part = np.partition(a, (low, high - 1), axis)  # as scipy does, so the sums match to the bit
    sl = [slice(None)] * part.ndim
    sl[axis] = slice(low, high)
    return np.mean(part[tuple(sl)].astype(float, copy=False), axis=axis)


def stratified_bootstrap_ci(
    scores_by_task: Sequence,
    statistic: Callable[[list[np.ndarray]], float | np.ndarray],
    reps: int = DEFAULT_REPS,
    rng: np.random.Generator | None = None,
    alpha: float = 1 - CONFIDENCE,
) -> tuple:
    """Percentile interval of `statistic` under the stratified bootstrap.

    `scores_by_task` holds one array per task (stratum) whose first axis is the runs (a 2-D array
    resamples whole rows, e.g. runs x eval steps). For each of `reps` replicates, the runs of every
    task are drawn with replacement, as many as the task has, and `statistic` is applied to the list
    of resampled arrays; it returns a number or a 1-D array. The interval is the (alpha/2,
    1 - alpha/2) percentiles of the replicates, elementwise. Draws: for each task in order,
    `rng.integers(0, n_task, size=(reps, n_task))`."""
    tasks = [np.asarray(s, dtype=float) for s in scores_by_task]
    if not tasks or any(len(t) == 0 for t in tasks):
        raise ValueError("every task needs at least one run")
    rng = rng if rng is not None else np.random.default_rng(0)
    draws = [rng.integers(0, len(t), size=(reps, len(t))) for t in tasks]
    replicates = np.asarray([statistic([t[d[r]] for t, d in zip(tasks, draws)]) for r in range(reps)], dtype=float)
    low, high = np.percentile(replicates, [100 * alpha / 2, 100 * (1 - alpha / 2)], axis=0)
    return low, high


def run_score_distribution(scores_by_task: Sequence, taus) -> np.ndarray:
    """F(tau) for each tau: the mean over tasks of the fraction of the task's runs with score > tau."""
    taus = np.asarray(taus, dtype=float)
    return np.mean([np.mean(np.asarray(s, dtype=float)[:, None] > taus[None, :], axis=0) for s in scores_by_task], axis=0)


def performance_profile(scores_by_task: Sequence, taus=TAUS, reps: int = DEFAULT_REPS,
                        rng: np.random.Generator | None = None, alpha: float = 1 - CONFIDENCE):
    """rliable's run-score performance profile: (F(tau), CI low, CI high) over `taus`, the band
    from the stratified bootstrap over the runs of each task. With one run per task there is no band
    (NaN): resampling one run per task would give a band of zero width."""
    point = run_score_distribution(scores_by_task, taus)
    if all(len(s) == 1 for s in scores_by_task):
        return point, np.full_like(point, np.nan), np.full_like(point, np.nan)
    low, high = stratified_bootstrap_ci(scores_by_task, lambda s: run_score_distribution(s, taus), reps, rng, alpha)
    return point, low, high


def minmax_normalize(scores, low: float, high: float) -> np.ndarray:
    """(scores - low) / (high - low); NaN when high == low: with every run at the same score there
    is no range to place a score in (pinning them at 1 would lift the aggregates across envs)."""
    scores = np.asarray(scores, dtype=float)
    if high == low:
        return np.full_like(scores, np.nan)
    return (scores - low) / (high - low)


def aggregate_mean(scores_by_task: Sequence) -> float:
    """rliable's aggregate mean: the mean over tasks of the per-task mean."""
    return float(np.mean([np.mean(s) for s in scores_by_task]))


def aggregate_iqm(scores_by_task: Sequence) -> float:
    """rliable's aggregate IQM: the IQM of all runs of all tasks pooled."""
    return float(iqm(np.concatenate([np.asarray(s, dtype=float) for s in scores_by_task])))


def probability_of_improvement(x_by_task: Sequence, y_by_task: Sequence) -> float:
    """rliable's P(X > Y): the mean over tasks of the probability that a run of X scores above a
    run of Y on that task (the Mann-Whitney U statistic over the pairs, ties counting half)."""
    per_task = []
    for x, y in zip(x_by_task, y_by_task):
        x, y = np.asarray(x, dtype=float)[:, None], np.asarray(y, dtype=float)[None, :]
        per_task.append(np.mean((x > y) + 0.5 * (x == y)))
    return float(np.mean(per_task))


def probability_of_improvement_ci(x_by_task: Sequence, y_by_task: Sequence, reps: int = DEFAULT_REPS,
                                  rng: np.random.Generator | None = None, alpha: float = 1 - CONFIDENCE):
    """(P(X > Y), CI low, CI high): X's and Y's runs are resampled independently within each task
    (each is a stratum of its own, rliable's StratifiedIndependentBootstrap). No interval (NaN)
    when every task has one run of each."""
    n = len(x_by_task)
    if n == 0 or n != len(y_by_task):
        raise ValueError("X and Y need scores on the same tasks, at least one")
    point = probability_of_improvement(x_by_task, y_by_task)
    if all(len(x) == 1 and len(y) == 1 for x, y in zip(x_by_task, y_by_task)):
        return point, np.nan, np.nan
    low, high = stratified_bootstrap_ci([*x_by_task, *y_by_task],
                                        lambda s: probability_of_improvement(s[:n], s[n:]), reps, rng, alpha)
    return point, float(low), float(high)


def _rng(seed: int, *what: str) -> np.random.Generator:
    """A generator per estimate, so one interval does not depend on which others were computed."""
    return np.random.default_rng([int(seed), zlib.crc32("|".join(what).encode())])


# ----------------------------------------------------------------------------------------------
# Reading runs.


@dataclass
class Run:
    path: str
    agent: str
    env: str
    agent_target: str | None
    env_id: str | None
    seed: int | None
    complete: bool
    steps: np.ndarray
    returns: np.ndarray
    cfg: DictConfig
    choices: dict
    overrides: dict  # key -> parsed value, as given on the command line
    problems: list[str] = field(default_factory=list)
    diverged_at: int | None = None  # first eval step with a non-finite return (NaN, inf), or the step
    # summary.json names as where training stopped on a non-finite loss

    @property
    def label(self) -> str:
        return f"seed={self.seed} ({_short(self.path)})"

    @property
    def final_step(self) -> int:
        return int(self.steps[-1])

    def score(self, last: int = 1) -> float:
        """The run's score: the mean return of its last `last` evaluations (1: its final return)."""
        return float(np.mean(self.returns[-last:]))


@dataclass
class Skipped:
    path: str
    reason: str


def _natural(s: str) -> list:
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", s)]


def _value_order(s: str) -> tuple:
    """Numbers by value (0.005 before 0.01), other values in natural order (run_2 before run_10)."""
    try:
        return (0, float(s), [])
    except ValueError:
        return (1, 0.0, _natural(s))


def _short(path: str) -> str:
    parts = os.path.normpath(os.path.abspath(path)).split(os.sep)
    return "/".join(parts[-2:])


def find_run_dirs(paths: Sequence[str]) -> tuple[list[str], list[str]]:
    """The run dirs (holding .hydra/config.yaml) under each path, in natural order, and the ones
    found more than once (counted once)."""
    found, repeated, seen = [], [], set()
    for p in paths:
        if not os.path.exists(p):
            raise AggregateError(f"{p} does not exist; pass a sweep dir (multirun/<date>/<time>) or a run dir "
                                 f"(outputs/<date>/<time>, one holding .hydra/config.yaml).")
        if not os.path.isdir(p):
            raise AggregateError(f"{p} is a file, not a directory; pass a sweep dir (multirun/<date>/<time>) or a run dir.")
        here = []
        for dirpath, dirnames, _ in os.walk(p):
            if os.path.isfile(os.path.join(dirpath, ".hydra", "config.yaml")):
                here.append(dirpath)
                dirnames[:] = []  # nothing below a run is another run (checkpoints, tb, wandb, ...)
                continue
            dirnames[:] = sorted((d for d in dirnames if not d.startswith(".")), key=_natural)
        if not here:
            raise AggregateError(f"no run directories (with .hydra/config.yaml) found under {p}; pass a sweep dir "
                                 f"(multirun/<date>/<time>) or a run dir.")
        for d in here:
            real = os.path.realpath(d)
            if real in seen:
                repeated.append(d)
            else:
                seen.add(real)
                found.append(d)
    return found, repeated


def _plain(value):
    if isinstance(value, (DictConfig, ListConfig)):
        try:
            return OmegaConf.to_container(value, resolve=True)
        except Exception:
            return OmegaConf.to_container(value, resolve=False)
    return value


def _select(cfg: DictConfig, key: str):
    """The config value at a dotted key, interpolations resolved when they can be; _MISSING if absent."""
    try:
        value = OmegaConf.select(cfg, key, default=_MISSING)
    except Exception:  # an interpolation that only resolves inside Hydra (${hydra:...}): the raw text
        node = OmegaConf.to_container(cfg, resolve=False)
        for part in key.split("."):
            if not isinstance(node, dict) or part not in node:
                return _MISSING
            node = node[part]
        return node
    return _plain(value)


def format_value(value) -> str:
    """One spelling for a value whether it came from an override or the saved config."""
    if value is _MISSING:
        return _UNSET
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple, dict)):
        return json.dumps(value, separators=(",", ":"))
    return str(value)


_parser = None


def parse_overrides(lines: Sequence[str]) -> dict:
    """`key=value` overrides as {key: value}, values parsed by Hydra's grammar (`+`/`++` dropped,
    `~key` kept as "~deleted")."""
    global _parser
    from hydra.core.override_parser.overrides_parser import OverridesParser

    _parser = _parser or OverridesParser.create()
    parsed = {}
    for line in lines:
        try:
            o = _parser.parse_override(line)
            parsed[o.key_or_group] = "~deleted" if o.is_delete() else _plain(o.value())
        except Exception:
            key, _, value = line.lstrip("+~").partition("=")
            parsed[key] = value
    return parsed


def read_eval_csv(path: str) -> tuple[np.ndarray, np.ndarray, list[str], int | None]:
    """Steps and return_mean of an eval.csv, sorted by step, what was wrong with it, and the first
    step whose return is not finite (NaN, inf: the run diverged; None if none). Rows that do not
    parse or have the wrong number of fields are left out, and so is a last line without a line end
    (cut off by a crash mid-write); a step logged twice keeps its last row. Raises ValueError when
    the file lacks the step or return_mean column."""
    problems, by_step, bad, repeated, not_finite = [], {}, [], [], []
    with open(path, newline="") as f:
        lines = f.read().splitlines(keepends=True)
    if len(lines) > 1 and not lines[-1].endswith(("\n", "\r")):
        problems.append("the last line of eval.csv is cut off (no line end), left out")
        lines = lines[:-1]
    reader = csv.DictReader(lines)
    fields = reader.fieldnames or []
    if fields and not {"step", "return_mean"} <= set(fields):
        raise ValueError(f"eval.csv has no step/return_mean columns (header: {','.join(fields)})")
    for line, row in enumerate(reader, start=2):
        try:
            if None in row or None in row.values():  # more or fewer fields than the header
                raise ValueError
            step, ret = int(float(row["step"])), float(row["return_mean"])
        except (TypeError, ValueError):
            bad.append(line)
            continue
        if not math.isfinite(ret):
            not_finite.append(step)
            continue
        if step in by_step:
            repeated.append(step)
        by_step[step] = ret
    if bad:
        problems.append(f"eval.csv line(s) {_steps_text(bad)} unreadable, left out")
    if repeated:
        problems.append(f"eval.csv has step(s) {_steps_text(sorted(set(repeated)))} twice, the last row kept")
    steps = np.array(sorted(by_step), dtype=np.int64)
    return steps, np.array([by_step[s] for s in steps], dtype=float), problems, min(not_finite, default=None)


def load_run(path: str) -> Run | Skipped:
    try:
        cfg = OmegaConf.load(os.path.join(path, ".hydra", "config.yaml"))
    except Exception as err:
        return Skipped(path, f"unreadable .hydra/config.yaml ({err})")
    problems = []
    choices, override_lines = {}, []
    try:
        choices, override_lines = hydra_record(path)
    except Exception as err:
        problems.append(f"unreadable .hydra/hydra.yaml or overrides.yaml ({err}); agent/env from the config")
    summary, summary_path = None, os.path.join(path, "summary.json")
    if os.path.exists(summary_path):
        try:
            with open(summary_path) as f:
                summary = json.load(f)
        except (OSError, ValueError) as err:
            problems.append(f"unreadable summary.json ({err}), counted as incomplete")
    eval_path = os.path.join(path, "eval.csv")
    if not os.path.exists(eval_path):
        return Skipped(path, "no eval.csv (the run ended before its first evaluation, or is not a training run)")
    try:
        steps, returns, eval_problems, diverged_at = read_eval_csv(eval_path)
    except (OSError, ValueError, csv.Error) as err:
        return Skipped(path, f"unreadable eval.csv ({err})")
    summary = summary if isinstance(summary, dict) else None
    if isinstance((summary or {}).get("diverged_at"), (int, float)):
        # train.py stopped it when a loss became NaN or inf, maybe before any evaluation saw it
        diverged_at = min(int(summary["diverged_at"]), diverged_at if diverged_at is not None else math.inf)
    if len(steps) == 0 and diverged_at is None:
        return Skipped(path, "eval.csv holds no evaluation rows")
    target = _select(cfg, "agent._target_")
    target = None if target is _MISSING else str(target)
    env_id = _select(cfg, "env.id")
    env_id = None if env_id is _MISSING else str(env_id)
    agent = choices.get("agent") or (summary or {}).get("agent") or (target.rsplit(".", 1)[-1].lower() if target else "unknown")
    env = env_label(choices, env_id, override_lines) if choices else None
    env = env or (summary or {}).get("env") or env_id or "unknown"
    seed = _select(cfg, "seed")
    try:
        seed = int(seed)
    except (TypeError, ValueError):
        seed = None
    complete = summary is not None and not summary.get("stopped", False)
    last_eval = max([*steps.tolist(), diverged_at if diverged_at is not None else -1])
    if complete and isinstance(summary.get("steps"), (int, float)) and last_eval > summary["steps"]:
        complete = False  # resumed after it finished (to extend it), and not finished again
        problems.append(f"summary.json is from step {summary['steps']} but eval.csv goes on to step {last_eval} "
                        f"(resumed after it finished): counted as incomplete")
    return Run(path, str(agent), str(env), target, env_id, seed, complete, steps, returns, cfg, choices,
               parse_overrides(override_lines), problems + eval_problems, diverged_at)


class ByKey(str):
    """A --by key. `--by key=value` gives it a default: the value of the runs that lack the key
    (runs saved before the key existed, or from another program such as benchmarks/sb3_learning.py)."""

    default = _MISSING

    def __new__(cls, spec: str):
        key, given, default = spec.partition("=")
        self = super().__new__(cls, key.strip())
        if given:
            self.default = default.strip()
        return self


def config_value(run: Run, key: str):
    """A run's own value of a key: its config group choice, else its override, else its config at
    the dotted key; _MISSING if it has none."""
    if key in run.choices:
        return run.choices[key]
    if key in run.overrides:
        return run.overrides[key]
    return _select(run.cfg, key)


def by_value(run: Run, key: ByKey):
    """A run's value of a --by key: its own (`config_value`), else the key's default."""
    value = config_value(run, key)
    return key.default if value is _MISSING else value


# ----------------------------------------------------------------------------------------------
# Grouping and the summary of each group.


def group_name(agent: str, env: str | None, by: Sequence[str], values: Sequence[str]) -> str:
    name = agent if env is None else f"{agent}/{env}"
    extra = ", ".join(f"{k}={v}" for k, v in zip(by, values))
    return f"{name} ({extra})" if extra else name


def group_key(run: Run, by: Sequence[ByKey]) -> tuple:
    """(agent, env, *by values as text): the group a run belongs to."""
    return (run.agent, run.env, *[format_value(by_value(run, k)) for k in by])


def group_runs(runs: list[Run], by: Sequence[ByKey]) -> dict[tuple, list[Run]]:
    """{(agent, env, *by values): runs}, sorted; raises on an unknown --by key and on a group
    that mixes agent classes or env ids under one name."""
    for key in by:
        if all(config_value(r, key) is _MISSING for r in runs):  # a default does not make a key exist
            groups = sorted({k for r in runs for k in r.choices if "/" not in k})
            raise AggregateError(
                f"--by {key}: no run has this key: it is not a config group choice in .hydra/hydra.yaml, "
                f"not in any run's overrides and not in .hydra/config.yaml. Config groups of these runs: "
                f"{', '.join(groups) or 'none'}; config keys are dotted paths such as agent.tau or batch_size.")
    groups: dict[tuple, list[Run]] = {}
    for run in runs:
        groups.setdefault(group_key(run, by), []).append(run)
    for key, members in groups.items():
        members.sort(key=lambda r: (r.seed if r.seed is not None else -1, _natural(r.path)))
        for what, attr in (("agent classes (agent._target_)", "agent_target"), ("env ids (env.id)", "env_id")):
            kinds = {}
            for r in members:
                kinds.setdefault(getattr(r, attr), []).append(r.path)
            if len(kinds) > 1:
                listing = "; ".join(f"{v} in {len(ps)} run(s): {', '.join(ps[:3])}{', ...' if len(ps) > 3 else ''}"
                                    for v, ps in kinds.items())
                raise AggregateError(
                    f"the runs grouped as {group_name(key[0], key[1], by, key[2:])} use different {what}: {listing}. "
                    f"The same config name meant different things in these runs (e.g. sweeps from different "
                    f"versions of the code); aggregate them separately, or split the group with --by "
                    f"(e.g. --by {'agent._target_' if attr == 'agent_target' else 'env.id'}).")
    return dict(sorted(groups.items(), key=lambda kv: [_value_order(str(x)) for x in kv[0]]))


def _last_evals(last: int) -> str:
    return "last evaluation" if last == 1 else f"last {last} evaluations"


def score_text(last: int) -> str:
    """What a run's score is, for the report."""
    if last == 1:
        return "Score = final return = the `return_mean` of each run's last evaluation (`eval.csv`)."
    return (f"Score = the mean `return_mean` of each run's last {last} evaluations (`eval.csv`, `--last {last}`), "
            f"which smooths over a policy that dips from one evaluation to the next.")


def _neutral(key: str) -> bool:
    return any(key == k or key.startswith(k + ".") for k in _NEUTRAL_OVERRIDES)


def group_notes(runs: list[Run], by: Sequence[ByKey], last: int = 1) -> list[str]:
    """What a reader of the group's numbers must know: incomplete runs, unequal lengths, runs
    that differ in more than the seed, repeated seeds, runs with fewer evaluations than the score
    averages, unreadable eval rows, unset --by keys."""
    notes = []
    if len(runs) == 1:
        notes.append("one run: no confidence interval")
    elif len(runs) < MIN_CI_RUNS:
        notes.append(f"{len(runs)} runs: bootstrap CIs from fewer than {MIN_CI_RUNS} runs are too narrow")
    incomplete = [r for r in runs if not r.complete]
    if incomplete:
        notes.append(f"{len(incomplete)} incomplete run(s) (no summary.json, or an older one: stopped, crashed, resumed "
                     f"or still running), "
                     f"scored at their {_last_evals(last)}: "
                     + ", ".join(f"{r.label} at step {r.final_step}" for r in incomplete))
    ends = Counter(r.final_step for r in runs)
    if len(ends) > 1:
        parts = []
        for step in sorted(ends, reverse=True):
            short = [r.label for r in runs if r.final_step == step and not r.complete]
            n = ends[step]
            parts.append(f"{step} ({n} run{'s' if n > 1 else ''}" + (f", incomplete: {', '.join(short)})" if short else ")"))
        notes.append("runs end at steps " + ", ".join(parts) + f"; each run is scored at its own {_last_evals(last)}")
    short_runs = [r for r in runs if len(r.returns) < last]
    if short_runs:
        notes.append(f"{len(short_runs)} run(s) have fewer than the {last} evaluations --last {last} averages, so "
                     f"their score is the mean of all they have: "
                     + ", ".join(f"{r.label} ({len(r.returns)})" for r in short_runs))
    spans = Counter(int(r.steps[-1] - r.steps[-min(last, len(r.steps))]) for r in runs)
    if last > 1 and len(spans) > 1:
        notes.append(f"the last {last} evaluations span different numbers of steps in different runs "
                     f"({', '.join(f'{s}: {n} run(s)' for s, n in sorted(spans.items()))}), so the scores average "
                     f"over different stretches of training")
    keys = sorted({k for r in runs for k in r.overrides if not _neutral(k) and k not in by and k not in ("agent", "env")})
    for key in keys:
        spelled = Counter(format_value(config_value(r, key)) for r in runs)
        if len(spelled) > 1:
            counts = [f"{v}: {n} run(s)" for v, n in sorted(spelled.items(), key=lambda kv: _value_order(kv[0]))]
            if len(counts) > 6:
                counts = counts[:5] + [f"... {len(counts) - 5} more values"]
            notes.append(f"runs differ in {key} ({', '.join(counts)}); split them with --by {key}")
    seeds = Counter(r.seed for r in runs)
    for seed, n in sorted(seeds.items(), key=lambda kv: str(kv[0])):
        if n > 1:
            notes.append(f"seed {seed} appears in {n} runs: " + ", ".join(_short(r.path) for r in runs if r.seed == seed))
    for r in runs:
        notes.extend(f"{r.label}: {p}" for p in r.problems)
    for key in by:
        unset = [r.label for r in runs if config_value(r, key) is _MISSING]
        if unset:
            shown = _UNSET if key.default is _MISSING else f"{key.default} (--by {key}={key.default})"
            notes.append(f"--by {key} is unset in {len(unset)} run(s), shown as {shown}: {', '.join(unset)}")
    return notes


MIN_CURVE_RUNS = 2  # the dashed part of a learning curve needs at least this many runs at a step


@dataclass
class Curve:
    steps: np.ndarray  # the eval steps all runs have: the solid curve
    point: np.ndarray
    low: np.ndarray
    high: np.ndarray
    n_runs: int
    # beyond the last common step, over the runs that went on (dashed); n = runs at each step
    more_steps: np.ndarray
    more_point: np.ndarray
    more_low: np.ndarray
    more_high: np.ndarray
    more_n: np.ndarray
    note: str | None


def _iqm_band(matrix: np.ndarray, reps: int, rng: np.random.Generator):
    """IQM over the runs (rows) at each step (column) and its bootstrap band, whole runs resampled.
    One run has no band (NaN, not drawn): resampling it would give a band of zero width."""
    if len(matrix) < 2:
        return iqm(matrix, axis=0), np.full(matrix.shape[1], np.nan), np.full(matrix.shape[1], np.nan)
    low, high = stratified_bootstrap_ci([matrix], lambda s: iqm(s[0], axis=0), reps, rng)
    return iqm(matrix, axis=0), np.atleast_1d(low), np.atleast_1d(high)


def _values_at(run: Run, steps) -> np.ndarray:
    return run.returns[np.searchsorted(run.steps, steps)]


def learning_curve(runs: list[Run], reps: int, rng: np.random.Generator) -> Curve | None:
    """The IQM over runs of the eval return with its bootstrap band: solid over the eval steps all
    runs have; past the last of them, dashed over the runs that went on, in segments of steps with
    the same runs, where at least MIN_CURVE_RUNS remain. None when the runs share no eval step."""
    have = [set(r.steps.tolist()) for r in runs]
    steps = np.array(sorted(set.intersection(*have)), dtype=np.int64)
    if len(steps) == 0:
        return None
    point, low, high = _iqm_band(np.stack([_values_at(r, steps) for r in runs]), reps, rng)

    segments: list[tuple[tuple[int, ...], list[int]]] = []  # (indices of the runs, steps)
    dropped = []
    for step in sorted(set.union(*have) - set(steps.tolist())):
        if step < steps[-1]:
            continue
        members = tuple(i for i, h in enumerate(have) if step in h)
        if len(members) < MIN_CURVE_RUNS:
            dropped.append(step)
        elif segments and segments[-1][0] == members:
            segments[-1][1].append(step)
        else:
            segments.append((members, [step]))
    more = [[], [], [], [], []]
    for members, seg_steps in segments:
        p, lo, hi = _iqm_band(np.stack([_values_at(runs[i], seg_steps) for i in members]), reps, rng)
        for acc, values in zip(more, (seg_steps, p, lo, hi, [len(members)] * len(seg_steps))):
            acc.extend(values)

    notes = []
    gaps = sorted(s for s in set.union(*have) - set(steps.tolist()) if s < steps[-1])
    if gaps:
        notes.append(f"the runs' eval steps differ: steps {_steps_text(gaps)} are not drawn (not all runs have them)")
    if segments or dropped:
        notes.append(f"learning curve solid to step {steps[-1]}, the last evaluation all {len(runs)} runs have")
    if segments:
        parts = ", ".join(f"{len(m)} runs to step {st[-1]}" for m, st in segments)
        notes.append(f"dashed beyond it over the runs that went on ({parts})")
    if dropped:
        notes.append(f"eval steps {_steps_text(dropped)} have fewer than {MIN_CURVE_RUNS} runs and are not drawn")
    return Curve(steps, point, low, high, len(runs), *(np.asarray(a) for a in more), "; ".join(notes) or None)


def _steps_text(steps: list[int]) -> str:
    return ", ".join(map(str, steps)) if len(steps) <= 4 else f"{steps[0]} to {steps[-1]} ({len(steps)} steps)"


# ----------------------------------------------------------------------------------------------
# Output.


def _num(x: float) -> str:
    if not math.isfinite(x):
        return str(x)
    a = abs(x)
    return f"{x:.1f}" if a >= 100 else f"{x:.2f}" if a >= 1 else f"{x:.3f}"


def _ci(low: float, high: float) -> str:
    return f"[{_num(low)}, {_num(high)}]" if math.isfinite(low) and math.isfinite(high) else "n/a"


def _md_table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c).replace("|", "\\|") for c in row) + " |" for row in rows]
    return "\n".join(lines)


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name)


def _color(i: int):
    import matplotlib

    return matplotlib.colormaps["tab10"](i % 10)


def plot_curves(path: str, env: str, env_id: str | None, curves: list[tuple[str, int, Curve]]) -> None:
    """All groups of one env on one axes: IQM eval return vs env steps, 95% CI bands."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    dashed = False
    for label, color, c in curves:
        marker = "o" if len(c.steps) < 3 else None
        ax.plot(c.steps, c.point, color=_color(color), marker=marker, label=f"{label} (n={c.n_runs})")
        ax.fill_between(c.steps, c.low, c.high, color=_color(color), alpha=0.2, linewidth=0)
        if len(c.more_steps):
            dashed = True
            ax.plot(np.r_[c.steps[-1], c.more_steps], np.r_[c.point[-1], c.more_point], color=_color(color), linestyle="--")
            ax.fill_between(np.r_[c.steps[-1], c.more_steps], np.r_[c.low[-1], c.more_low], np.r_[c.high[-1], c.more_high],
                            color=_color(color), alpha=0.1, linewidth=0)
    if dashed:
        ax.plot([], [], color="gray", linestyle="--", label="fewer runs (some ended early)")
    ax.set_xlabel("env steps")
    ax.set_ylabel("eval return (IQM over runs)")
    ax.set_title(f"{env}" + (f" ({env_id})" if env_id and env_id != env else "") + f": IQM, {CONFIDENCE:.0%} bootstrap CI")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_profile(path: str, taus: np.ndarray, profiles: list[tuple[str, int, np.ndarray, np.ndarray, np.ndarray]],
                 n_envs: int, last: int = 1) -> None:
    """rliable's performance profile: fraction of runs with normalized score > tau, 95% CI bands."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    for label, color, point, low, high in profiles:
        ax.plot(taus, point, color=_color(color), label=label)
        ax.fill_between(taus, low, high, color=_color(color), alpha=0.2, linewidth=0)
    what = "final return" if last == 1 else f"mean return of the last {last} evaluations"
    ax.set_xlabel(f"normalized {what} $\\tau$ (min-max per env over all runs here; no reference scores)")
    ax.set_ylabel(r"fraction of runs with score > $\tau$")
    ax.set_title(f"Performance profile over {n_envs} env(s), {CONFIDENCE:.0%} stratified bootstrap CI")
    ax.set_xlim(0, 1)
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    if profiles:
        ax.legend(fontsize="small")
    else:
        ax.text(0.5, 0.5, "no env whose runs differ in score: nothing to normalize", ha="center", va="center")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


@dataclass
class Report:
    markdown: str
    rows: list[dict]
    files: list[str]
    out_dir: str


def _by_keys(by: Sequence[str]) -> list[ByKey]:
    keys = []
    for item in by:
        for spec in item.split(","):
            k = ByKey(spec)
            if k and k not in keys and k not in ("agent", "env"):
                keys.append(k)
    return keys


def load_runs(paths: Sequence[str], complete_only: bool = False) -> tuple[list[Run], list[Run], list[Skipped], list[str]]:
    """The runs under `paths`, the runs that diverged (kept apart: they have no score to
    count), the run dirs skipped (with the reason) and those found twice."""
    dirs, repeated = find_run_dirs(paths)
    runs, diverged, skipped = [], [], []
    for d in dirs:
        loaded = load_run(d)
        if isinstance(loaded, Skipped):
            skipped.append(loaded)
        elif loaded.diverged_at is not None:
            diverged.append(loaded)
        elif complete_only and not loaded.complete:
            skipped.append(Skipped(d, f"incomplete (no summary.json, or an older one; last eval at step "
                                      f"{loaded.final_step}), left out by --complete-only"))
        else:
            runs.append(loaded)
    if not runs:
        listing = "; ".join([*(f"{s.path}: {s.reason}" for s in skipped),
                             *(f"{r.path}: diverged at step {r.diverged_at}" for r in diverged)])
        raise AggregateError(f"found {len(dirs)} run dir(s) under {', '.join(paths)} but none has evaluations to "
                             f"aggregate: {listing}")
    return runs, diverged, skipped, repeated


MIN_CI_RUNS = 5  # below this many runs per task, a percentile bootstrap CI is noted as too narrow


def summarize_group(key: tuple, runs: list[Run], by: Sequence[str], reps: int, seed: int, n_diverged: int = 0,
                    last: int = 1) -> dict:
    """The row of results.csv: the mean and IQM of the runs' scores (`Run.score(last)`) with their
    bootstrap CIs over the runs (NaN with one run: resampling one score gives no interval)."""
    finals = np.array([r.score(last) for r in runs])
    (m_low, i_low), (m_high, i_high) = (np.nan, np.nan), (np.nan, np.nan)
    if len(runs) > 1:
        (m_low, i_low), (m_high, i_high) = stratified_bootstrap_ci(
            [finals], lambda s: [np.mean(s[0]), iqm(s[0])], reps, _rng(seed, "final", *key))
    return {
        "agent": key[0], "env": key[1], **dict(zip(by, key[2:])),
        "n_runs": len(runs), "n_incomplete": sum(not r.complete for r in runs), "n_diverged": n_diverged,
        "mean": float(np.mean(finals)), "mean_ci_low": float(m_low), "mean_ci_high": float(m_high),
        "iqm": float(iqm(finals)), "iqm_ci_low": float(i_low), "iqm_ci_high": float(i_high),
        "final_step_min": min(r.final_step for r in runs), "final_step_max": max(r.final_step for r in runs),
        "score_evals": last, "env_id": runs[0].env_id or "",
    }


def write_csv(path: str, rows: list[dict], notes: list[list[str]], by: Sequence[str]) -> None:
    header = ["agent", "env", *by, "n_runs", "n_incomplete", "n_diverged", "mean", "mean_ci_low", "mean_ci_high", "iqm",
              "iqm_ci_low", "iqm_ci_high", "final_step_min", "final_step_max", "score_evals", "env_id", "notes"]
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=header, extrasaction="ignore")
        writer.writeheader()
        for row, row_notes in zip(rows, notes):
            writer.writerow({**row, "notes": "; ".join(row_notes)})


def render_markdown(paths: Sequence[str], by: Sequence[str], reps: int, seed: int, n_runs: int,
                    rows: list[dict], row_notes: list[list[str]], across: list[list[str]],
                    note_lines: list[str], files: list[str], improvement: Sequence[dict] = (), last: int = 1) -> str:
    ci = f"{CONFIDENCE:.0%} CI"
    table = _md_table(
        ["agent", "env", *by, "runs", "mean", f"mean {ci}", "IQM", f"IQM {ci}", "final step", "notes"],
        [[row["agent"], row["env"], *[row[k] for k in by],
          str(row["n_runs"]) + (f" (+{row['n_diverged']} diverged)" if row["n_diverged"] else ""), _num(row["mean"]),
          _ci(row["mean_ci_low"], row["mean_ci_high"]), _num(row["iqm"]), _ci(row["iqm_ci_low"], row["iqm_ci_high"]),
          str(row["final_step_max"]) if row["final_step_min"] == row["final_step_max"]
          else f"{row['final_step_min']}-{row['final_step_max']}",
          (f"{len(notes)} note(s)" + (f", {row['n_incomplete']} incomplete" if row["n_incomplete"] else "")) if notes else ""]
         for row, notes in zip(rows, row_notes)])
    md = [
        f"# Aggregate of {n_runs} run(s) in {len(rows)} group(s)",
        "",
        "Sources: " + ", ".join(f"`{p}`" for p in paths) + (f" (grouped by agent, env, {', '.join(by)})" if by else ""),
        "",
        score_text(last) + " The mean and IQM are over the runs' scores. IQM = interquartile mean "
        "(mean of the middle 50% of runs, `scipy.stats.trim_mean(x, 0.25)`; the plain mean below 4 runs). "
        f"CIs: {CONFIDENCE:.0%} percentile bootstrap over runs ({reps} replicates, seed {seed}), as in rliable "
        f"(Agarwal et al. 2021); none from a single run, and with fewer than {MIN_CI_RUNS} runs they are too narrow "
        "(they cover the true value less often than their level says). Runs whose evaluation return became NaN "
        "or infinite diverged: they are counted as \"+k diverged\" and left out of the statistics.",
        "",
        table,
        "",
        "## Across envs (min-max normalized)",
        "",
        "There are no reference scores, so the runs' scores are min-max normalized per env over all runs of that env "
        "in this aggregation: (R - min) / (max - min). The scores are relative to these runs and do not compare "
        "across aggregations. Mean = mean over envs of the per-env means; IQM = IQM of all runs pooled; CIs: "
        "stratified bootstrap (runs resampled within each env). The performance profile plots the same scores.",
        "",
        _md_table(["group", "envs", "runs", "mean", f"mean {ci}", "IQM", f"IQM {ci}"], across),
        "",
        *([
            "## Probability of improvement",
            "",
            "P(X > Y): the mean over the envs both groups have of the probability that a run of X has a higher "
            "score than a run of Y (ties count half; P(Y > X) = 1 - P(X > Y)), as in rliable. Raw returns, no "
            "normalization. CI: stratified bootstrap, X's and Y's runs resampled independently within each env. "
            "0.5 means neither is ahead; a CI that excludes 0.5 is a difference these runs support.",
            "",
            _md_table(["X", "Y", "envs", "runs (X, Y)", "P(X > Y)", ci],
                      [[d["x"], d["y"], d["envs"], f"{d['runs_x']}, {d['runs_y']}", f"{d['p_x_above_y']:.3f}",
                        _ci(d["ci_low"], d["ci_high"])] for d in improvement]),
            "",
        ] if improvement else []),
        "## Notes",
        "",
        *[f"- {n}" for n in note_lines],
        "",
        "## Files",
        "",
        *[f"- `{os.path.basename(p)}`" for p in files],
        "",
    ]
    return "\n".join(md)


def aggregate(paths: Sequence[str], by: Sequence[str] = (), out: str | None = None, reps: int = DEFAULT_REPS,
              seed: int = 0, complete_only: bool = False, last: int = 1) -> Report:
    """Read the runs under `paths`, write results.md, results.csv, curves_<env>.png and
    performance_profile.png into `out` (default <first path>/aggregate) and return the report."""
    if not paths:
        raise AggregateError("no path given; pass a sweep dir (multirun/<date>/<time>) or a run dir.")
    if reps < 1:
        raise AggregateError(f"--reps {reps}: the bootstrap needs at least 1 replicate (rliable uses 50000, "
                             f"the default is {DEFAULT_REPS}).")
    if last < 1:
        raise AggregateError(f"--last {last}: a run's score is the mean of its last K evaluations, so K must be at "
                             f"least 1 (1, the default, scores each run by its final evaluation).")
    by = _by_keys(by)
    runs, diverged, skipped, repeated = load_runs(paths, complete_only)
    groups = group_runs(runs, by)
    diverged_by_group: dict[tuple, list[Run]] = {}
    for r in diverged:
        diverged_by_group.setdefault(group_key(r, by), []).append(r)
    out_dir = out or os.path.join(paths[0], "aggregate")
    if os.path.exists(out_dir) and not os.path.isdir(out_dir):
        raise AggregateError(f"--out {out_dir} is a file; pass a directory (it is created if missing).")
    os.makedirs(out_dir, exist_ok=True)

    profile_keys = sorted({(k[0], *k[2:]) for k in groups}, key=lambda k: [_value_order(str(x)) for x in k])
    color = {k: i for i, k in enumerate(profile_keys)}  # one color per agent (x --by values) in every plot
    envs = sorted({k[1] for k in groups}, key=_natural)
    rows = [summarize_group(key, members, by, reps, seed, len(diverged_by_group.get(key, [])), last)
            for key, members in groups.items()]
    notes = {key: group_notes(members, by, last) for key, members in groups.items()}
    for key, members in diverged_by_group.items():
        if key in notes:
            notes[key].append(f"{len(members)} run(s) diverged (an evaluation return became NaN or infinite), left "
                              f"out of the statistics: " + ", ".join(f"{r.label} at step {r.diverged_at}" for r in members))

    # Learning curves, one PNG per env.
    plots = []
    for env in envs:
        curves = []
        for key, members in groups.items():
            if key[1] != env:
                continue
            c = learning_curve(members, reps, _rng(seed, "curve", *key))
            if c is None:
                notes[key].append("no learning curve: the runs share no eval step")
                continue
            if c.note:
                notes[key].append(c.note)
            curves.append((group_name(key[0], None, by, key[2:]), color[(key[0], *key[2:])], c))
        env_ids = {r.env_id for k, ms in groups.items() if k[1] == env for r in ms}
        if curves:
            plots.append(os.path.join(out_dir, f"curves_{_safe(env)}.png"))
            plot_curves(plots[-1], env, env_ids.pop() if len(env_ids) == 1 else None, curves)

    # Min-max normalization per env: the across-env table and the performance profile.
    global_notes = [f"{group_name(key[0], key[1], by, key[2:])}: all {len(members)} run(s) diverged (an evaluation "
                    f"return became NaN or infinite), so it has no row: "
                    + ", ".join(f"{r.label} at step {r.diverged_at}" for r in members)
                    for key, members in diverged_by_group.items() if key not in groups]
    bounds = {}
    for env in envs:
        finals = [r.score(last) for k, ms in groups.items() if k[1] == env for r in ms]
        if min(finals) == max(finals):
            global_notes.append(f"{env}: every run has the same score ({_num(finals[0])}), so min-max "
                                f"normalization is undefined there; {env} is left out of the across-env table and the "
                                f"performance profile")
        else:
            bounds[env] = (min(finals), max(finals))
    scored = [e for e in envs if e in bounds]
    across, profiles = [], []
    for pkey in profile_keys:
        by_env = {key[1]: members for key, members in groups.items() if (key[0], *key[2:]) == pkey and key[1] in bounds}
        label = group_name(pkey[0], None, by, pkey[1:])
        if not by_env:
            across.append([label, "0", "0", "n/a", "n/a", "n/a", "n/a"])
            continue
        tasks = [minmax_normalize([r.score(last) for r in by_env[e]], *bounds[e]) for e in scored if e in by_env]
        n_div = sum(len(ms) for k, ms in diverged_by_group.items() if (k[0], *k[2:]) == pkey and k[1] in by_env)
        label_runs = f" (+{n_div} diverged)" if n_div else ""
        if len({len(t) for t in tasks}) > 1:
            counts = ", ".join(f"{e} {len(by_env[e])}" for e in scored if e in by_env)
            global_notes.append(f"{label} has unequal runs per env ({counts}): its across-env mean and profile weigh "
                                f"every env equally, its IQM pools the runs and so weighs each env by its runs")
        if len(by_env) < len(scored):
            global_notes.append(f"{label} has no runs on {', '.join(e for e in scored if e not in by_env)}: its across-env "
                                f"numbers and profile cover {', '.join(e for e in scored if e in by_env)} only, so they "
                                f"do not compare with groups that cover more envs")
        (m_low, i_low), (m_high, i_high) = (np.nan, np.nan), (np.nan, np.nan)
        if any(len(t) > 1 for t in tasks):  # with one run per env the bootstrap has nothing to resample
            (m_low, i_low), (m_high, i_high) = stratified_bootstrap_ci(
                tasks, lambda s: [aggregate_mean(s), aggregate_iqm(s)], reps, _rng(seed, "across", *pkey))
        across.append([label, str(len(tasks)), f"{sum(len(t) for t in tasks)}{label_runs}", _num(aggregate_mean(tasks)),
                       _ci(m_low, m_high), _num(aggregate_iqm(tasks)), _ci(i_low, i_high)])
        point, low, high = performance_profile(tasks, TAUS, reps, _rng(seed, "profile", *pkey))
        profiles.append((label + label_runs, color[pkey], point, low, high))
    plots.append(os.path.join(out_dir, "performance_profile.png"))
    plot_profile(plots[-1], TAUS, profiles, len(scored), last)

    # Probability of improvement, every pair of groups on the envs both have (raw scores).
    improvement = []
    for i, a in enumerate(profile_keys):
        for b in profile_keys[i + 1:]:
            finals = {pk: {key[1]: [r.score(last) for r in ms] for key, ms in groups.items() if (key[0], *key[2:]) == pk}
                      for pk in (a, b)}
            shared = [e for e in envs if e in finals[a] and e in finals[b]]
            names = [group_name(pk[0], None, by, pk[1:]) for pk in (a, b)]
            if not shared:
                global_notes.append(f"{names[0]} and {names[1]} share no env, so there is no probability of "
                                    f"improvement between them")
                continue
            p, low, high = probability_of_improvement_ci([finals[a][e] for e in shared], [finals[b][e] for e in shared],
                                                         reps, _rng(seed, "improvement", *map(str, a), "|", *map(str, b)))
            improvement.append({"x": names[0], "y": names[1], "envs": " ".join(shared),
                                "runs_x": sum(len(finals[a][e]) for e in shared),
                                "runs_y": sum(len(finals[b][e]) for e in shared),
                                "p_x_above_y": p, "ci_low": low, "ci_high": high})

    # The notes, results.csv and results.md.
    note_lines = []
    n_incomplete = sum(not r.complete for r in runs)
    if n_incomplete:
        note_lines.append(f"{n_incomplete} of {len(runs)} runs are incomplete (no summary.json, or one older than their "
                          f"last evaluation: stopped, crashed, resumed or still running); each counts with its last "
                          f"evaluation.")
    if diverged:
        note_lines.append(f"{len(diverged)} run(s) diverged (an evaluation return became NaN or infinite) and are left "
                          f"out of every statistic, so the statistics describe the runs that did not diverge; the "
                          f"tables count them as \"+k diverged\".")
    for key in groups:
        note_lines.extend(f"{group_name(key[0], key[1], by, key[2:])}: {n}" for n in notes[key])
    note_lines.extend(global_notes)
    note_lines.extend(f"skipped {s.path}: {s.reason}" for s in skipped)
    note_lines.extend(f"{d} was found under more than one of the given paths; counted once" for d in repeated)
    note_lines.append(f"Learning curves: IQM over runs with a {CONFIDENCE:.0%} bootstrap band (whole runs resampled), "
                      f"solid at the eval steps all runs of a group have; where runs end at different steps the curve "
                      f"goes on dashed over the runs that went on, while at least {MIN_CURVE_RUNS} remain.")
    csv_path, md_path = os.path.join(out_dir, "results.csv"), os.path.join(out_dir, "results.md")
    write_csv(csv_path, rows, list(notes.values()), by)
    tables = [csv_path]
    if improvement:
        tables.append(os.path.join(out_dir, "improvement.csv"))
        with open(tables[-1], "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(improvement[0]))
            writer.writeheader()
            writer.writerows(improvement)
    markdown = render_markdown(paths, by, reps, seed, len(runs), rows, list(notes.values()), across, note_lines,
                               [*tables, *plots], improvement, last)
    with open(md_path, "w") as f:
        f.write(markdown)
    return Report(markdown, rows, [md_path, csv_path, *plots], out_dir)
