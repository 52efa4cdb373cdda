"""Finding and reading runs: the run dirs under the given paths, each run's eval.csv,
summary.json and Hydra record, what was wrong with them, and a run's value of a `--by` key."""
from __future__ import annotations

import csv
import json
import math
import os
import re
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
from omegaconf import DictConfig, ListConfig, OmegaConf

from training.faults import FAILED
from training.resume import env_label, hydra_record

UNSET = "(unset)"
MISSING = object()


class AggregateError(Exception):
    """Input that cannot be aggregated; the message names the problem and the fix."""


@dataclass
class RunRecord:
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
    provenance: dict = field(default_factory=dict)  # summary.json's code and versions (training/provenance.py)

    @property
    def label(self) -> str:
        return f"seed={self.seed} ({short_path(self.path)})"

    @property
    def final_step(self) -> int:
        return int(self.steps[-1])

    def score(self, last: int = 1) -> float:
        """The run's score: the mean return of its last `last` evaluations (1: its final return)."""
        return float(np.mean(self.returns[-last:]))

    def episode_returns(self) -> np.ndarray:
        """The returns of its training episodes, in order (train.csv's `episode_return`), read once."""
        if "_episode_returns" not in self.__dict__:
            self.__dict__["_episode_returns"] = read_episode_returns(self.path)
        return self.__dict__["_episode_returns"]


@dataclass(frozen=True)
class Score:
    """What a run's score is: the mean return of its last `last` evaluations (eval.csv), or with
    `episodes`, of its last `episodes` training episodes (train.csv's `episode_return`, exploration
    included: the figure CleanRL publishes)."""

    last: int = 1
    episodes: int = 0

    def of(self, run: RunRecord) -> float:
        if self.episodes:
            return float(np.mean(run.episode_returns()[-self.episodes:]))
        return run.score(self.last)

    def count(self, run: RunRecord) -> int:
        """How many of what the score averages the run has."""
        return len(run.episode_returns()) if self.episodes else len(run.returns)

    @property
    def k(self) -> int:
        return self.episodes or self.last

    @property
    def source(self) -> str:
        """What is averaged, plural, for the notes."""
        return "training episodes" if self.episodes else "evaluations"

    @property
    def where(self) -> str:
        """Where each run is scored, for the notes: its last evaluation, its last K evaluations, ..."""
        if self.k == 1:
            return f"last {self.source[:-1]}"
        return f"last {self.k} {self.source}"

    @property
    def what(self) -> str:
        """The score's name, for the performance profile's axis."""
        return "final return" if self.k == 1 and not self.episodes else f"mean return of the {self.where}"

    @property
    def option(self) -> str:
        return f"--episodes {self.episodes}" if self.episodes else f"--last {self.last}"


@dataclass
class Skipped:
    path: str
    reason: str


def natural_key(s: str) -> list:
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", s)]


def value_order(s: str) -> tuple:
    """Numbers by value (0.005 before 0.01), other values in natural order (run_2 before run_10)."""
    try:
        return (0, float(s), [])
    except ValueError:
        return (1, 0.0, natural_key(s))


def short_path(path: str) -> str:
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
            dirnames[:] = sorted((d for d in dirnames if not d.startswith(".")), key=natural_key)
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


def _label_of_today(cfg: DictConfig, choice: str | None):
    """A run saved before its env config had a `label`: the label that config has now, resolved
    against the run's own env settings (atari-Pong for an Atari run with env.game=Pong), so that
    runs from before and after the label group together; MISSING where there is none."""
    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "conf", "env", f"{choice}.yaml")
    if not choice or not os.path.isfile(path):
        return MISSING
    template = OmegaConf.to_container(OmegaConf.load(path), resolve=False).get("label")
    if template is None:
        return MISSING
    probe = cfg.copy()
    OmegaConf.set_struct(probe, False)
    probe.env.label = template
    return _select(probe, "env.label")


def _select(cfg: DictConfig, key: str):
    """The config value at a dotted key, interpolations resolved when they can be; MISSING if absent."""
    try:
        value = OmegaConf.select(cfg, key, default=MISSING)
    except Exception:  # an interpolation that only resolves inside Hydra (${hydra:...}): the raw text
        node = OmegaConf.to_container(cfg, resolve=False)
        for part in key.split("."):
            if not isinstance(node, dict) or part not in node:
                return MISSING
            node = node[part]
        return node
    return _plain(value)


def format_value(value) -> str:
    """One spelling for a value whether it came from an override or the saved config."""
    if value is MISSING:
        return UNSET
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
        problems.append(f"eval.csv line(s) {steps_text(bad)} unreadable, left out")
    if repeated:
        problems.append(f"eval.csv has step(s) {steps_text(sorted(set(repeated)))} twice, the last row kept")
    steps = np.array(sorted(by_step), dtype=np.int64)
    return steps, np.array([by_step[s] for s in steps], dtype=float), problems, min(not_finite, default=None)


def steps_text(steps: list[int]) -> str:
    return ", ".join(map(str, steps)) if len(steps) <= 4 else f"{steps[0]} to {steps[-1]} ({len(steps)} steps)"


def _failure(path: str) -> str | None:
    """The error a sweep's job recorded when it failed (train.py's failed.json), or None."""
    try:
        with open(os.path.join(path, FAILED)) as f:
            record = json.load(f)
        return f"failed with exit code {record['exit_code']}: {record['error']}"
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as err:
        return f"failed (its {FAILED} is unreadable: {err})"


def load_run(path: str) -> RunRecord | Skipped:
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
    failed = _failure(path)
    if failed:
        problems.append(failed)
    eval_path = os.path.join(path, "eval.csv")
    if not os.path.exists(eval_path):
        return Skipped(path, failed or "no eval.csv (the run ended before its first evaluation, or is not a training run)")
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
    target = None if target is MISSING else str(target)
    env_id = _select(cfg, "env.id")
    env_id = None if env_id is MISSING else str(env_id)
    agent = choices.get("agent") or (summary or {}).get("agent") or (target.rsplit(".", 1)[-1].lower() if target else "unknown")
    label = _select(cfg, "env.label")
    if label is MISSING:
        label = _label_of_today(cfg, choices.get("env"))
    env = env_label(choices, env_id, override_lines, None if label is MISSING else str(label)) if choices else None
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
    provenance = {key: (summary or {})[key] for key in ("code", "versions") if isinstance((summary or {}).get(key), dict)}
    return RunRecord(path, str(agent), str(env), target, env_id, seed, complete, steps, returns, cfg, choices,
                     parse_overrides(override_lines), problems + eval_problems, diverged_at, provenance)


def read_episode_returns(path: str) -> np.ndarray:
    """A run's training episodes' returns from its train.csv; AggregateError if it has none to read."""
    train_path = os.path.join(path, "train.csv")
    try:
        with open(train_path, newline="") as f:
            rows = list(csv.DictReader(f))
        returns = np.array([float(row["episode_return"]) for row in rows if row.get("episode_return") not in (None, "")])
    except (OSError, ValueError, KeyError) as err:
        raise AggregateError(f"--episodes scores each run by its training episodes (train.csv's episode_return), but "
                             f"{short_path(path)} has none to read ({err}); leave --episodes out to score by its "
                             f"evaluations (eval.csv), or aggregate only runs that wrote train.csv.") from err
    if not len(returns):
        raise AggregateError(f"--episodes: {short_path(path)}'s train.csv holds no finished episode; leave --episodes "
                             f"out to score by its evaluations (eval.csv).")
    return returns


def load_runs(paths: Sequence[str], complete_only: bool = False) -> tuple[list[RunRecord], list[RunRecord], list[Skipped], list[str]]:
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


class ByKey(str):
    """A --by key. `--by key=value` gives it a default: the value of the runs that lack the key
    (runs saved before the key existed, or from another program such as benchmarks/sb3_learning.py)."""

    default = MISSING

    def __new__(cls, spec: str):
        key, given, default = spec.partition("=")
        self = super().__new__(cls, key.strip())
        if given:
            self.default = default.strip()
        return self


def by_keys(by: Sequence[str]) -> list[ByKey]:
    """The --by keys given (repeated or comma-separated), each once; agent and env group anyway."""
    keys = []
    for item in by:
        for spec in item.split(","):
            k = ByKey(spec)
            if k and k not in keys and k not in ("agent", "env"):
                keys.append(k)
    return keys


def config_value(run: RunRecord, key: str):
    """A run's own value of a key: its config group choice, else its override, else its config at
    the dotted key; MISSING if it has none."""
    if key in run.choices:
        return run.choices[key]
    if key in run.overrides:
        return run.overrides[key]
    return _select(run.cfg, key)


def by_value(run: RunRecord, key: ByKey):
    """A run's value of a --by key: its own (`config_value`), else the key's default."""
    value = config_value(run, key)
    return key.default if value is MISSING else value
