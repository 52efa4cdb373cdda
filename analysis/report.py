"""aggregate(): read the runs, group them, compute every table, curve, profile and probability,
and write results.md, results.csv, improvement.csv and the PNGs."""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from analysis.curves import CURVE_COLUMNS, MIN_CURVE_RUNS, curve_rows, learning_curve
from analysis.groups import group_key, group_name, group_notes, group_runs
from analysis.plots import plot_curves, plot_profile
from analysis.runs import AggregateError, RunRecord, Score, by_keys, load_runs, natural_key, value_order
from analysis.stats import (CONFIDENCE, DEFAULT_REPS, TAUS, aggregate_iqm, aggregate_mean, interval, mean_and_iqm,
                            minmax_normalize, performance_profile, probability_of_improvement_ci, seed_for)
from analysis.tables import (ci_text, num, render_markdown, summarize_group, write_csv,
                             write_improvement_csv, write_rows)


@dataclass
class Report:
    markdown: str
    rows: list[dict]
    files: list[str]
    out_dir: str


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name)


def _check_arguments(paths: Sequence[str], reps: int, seed: int, last: int, episodes: int) -> None:
    if not paths:
        raise AggregateError("no path given; pass a sweep dir (multirun/<date>/<time>) or a run dir.")
    if reps < 1:
        raise AggregateError(f"--reps {reps}: the bootstrap needs at least 1 replicate (rliable uses 50000, "
                             f"the default is {DEFAULT_REPS}).")
    if not 0 <= seed < 2**32:
        raise AggregateError(f"--seed {seed}: the bootstrap's seed is a number from 0 to 2**32 - 1 (numpy's "
                             f"generator, which rliable draws from, takes no other); the default is 0.")
    if last < 1:
        raise AggregateError(f"--last {last}: a run's score is the mean of its last K evaluations, so K must be at "
                             f"least 1 (1, the default, scores each run by its final evaluation).")
    if episodes < 0 or (episodes and last != 1):
        raise AggregateError(f"--episodes {episodes}: a run's score is the mean return of its last K training episodes "
                             f"(K >= 1), in place of its evaluations' (--last); pass one of the two.")


def _draw_curves(out_dir: str, groups: dict[tuple, list[RunRecord]], envs: list[str], by: Sequence[str], color: dict,
                 notes: dict[tuple, list[str]], reps: int, seed: int) -> tuple[list[str], list[str]]:
    """curves_<env>.png and curves_<env>.csv (the points drawn, which `benchmarks/figures.py` redraws
    from) for every env; notes where a group's curve turns dashed or has none."""
    plots, tables = [], []
    for env in envs:
        curves = []
        for key, members in groups.items():
            if key[1] != env:
                continue
            c = learning_curve(members, reps, seed_for(seed, "curve", *key))
            if c is None:
                notes[key].append("no learning curve: the runs' evaluations do not overlap in steps")
                continue
            if c.note:
                notes[key].append(c.note)
            curves.append((group_name(key[0], None, by, key[2:]), color[(key[0], *key[2:])], c))
        env_ids = {r.env_id for k, ms in groups.items() if k[1] == env for r in ms}
        if curves:
            env_id = env_ids.pop() if len(env_ids) == 1 else None
            plots.append(os.path.join(out_dir, f"curves_{_safe(env)}.png"))
            plot_curves(plots[-1], env, env_id, curves)
            tables.append(os.path.join(out_dir, f"curves_{_safe(env)}.csv"))
            write_rows(tables[-1], CURVE_COLUMNS, curve_rows(env, env_id, curves))
    return plots, tables


def _score_bounds(groups: dict[tuple, list[RunRecord]], envs: list[str], score: Score,
                  global_notes: list[str]) -> dict[str, tuple[float, float]]:
    """(min, max) of the scores of each env's runs, for min-max normalization; an env where every
    run has the same score has none (and a note)."""
    bounds = {}
    for env in envs:
        finals = [score.of(r) for k, ms in groups.items() if k[1] == env for r in ms]
        if min(finals) == max(finals):
            global_notes.append(f"{env}: every run has the same score ({num(finals[0])}), so min-max "
                                f"normalization is undefined there; {env} is left out of the across-env table and the "
                                f"performance profile")
        else:
            bounds[env] = (min(finals), max(finals))
    return bounds


def _across_envs(groups: dict[tuple, list[RunRecord]], diverged_by_group: dict[tuple, list[RunRecord]], profile_keys: list[tuple],
                 envs: list[str], bounds: dict, by: Sequence[str], color: dict, score: Score, reps: int, seed: int,
                 global_notes: list[str]) -> tuple[list[list[str]], list[tuple]]:
    """The rows of the across-env table and the performance profiles, on min-max normalized scores."""
    scored = [e for e in envs if e in bounds]
    across, profiles = [], []
    for pkey in profile_keys:
        by_env = {key[1]: members for key, members in groups.items() if (key[0], *key[2:]) == pkey and key[1] in bounds}
        label = group_name(pkey[0], None, by, pkey[1:])
        if not by_env:
            across.append([label, "0", "0", "n/a", "n/a", "n/a", "n/a"])
            continue
        tasks = [minmax_normalize([score.of(r) for r in by_env[e]], *bounds[e]) for e in scored if e in by_env]
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
            (m_low, i_low), (m_high, i_high) = interval(tasks, mean_and_iqm, reps, seed_for(seed, "across", *pkey))
        across.append([label, str(len(tasks)), f"{sum(len(t) for t in tasks)}{label_runs}", num(aggregate_mean(*tasks)),
                       ci_text(m_low, m_high), num(aggregate_iqm(*tasks)), ci_text(i_low, i_high)])
        point, low, high = performance_profile(tasks, TAUS, reps, seed_for(seed, "profile", *pkey))
        profiles.append((label + label_runs, color[pkey], point, low, high))
    return across, profiles


def _improvement(groups: dict[tuple, list[RunRecord]], profile_keys: list[tuple], envs: list[str], by: Sequence[str],
                 score: Score, reps: int, seed: int, global_notes: list[str]) -> list[dict]:
    """P(X > Y) for every pair of groups, on the envs both have (raw scores)."""
    improvement = []
    for i, a in enumerate(profile_keys):
        for b in profile_keys[i + 1:]:
            finals = {pk: {key[1]: [score.of(r) for r in ms] for key, ms in groups.items() if (key[0], *key[2:]) == pk}
                      for pk in (a, b)}
            shared = [e for e in envs if e in finals[a] and e in finals[b]]
            names = [group_name(pk[0], None, by, pk[1:]) for pk in (a, b)]
            if not shared:
                global_notes.append(f"{names[0]} and {names[1]} share no env, so there is no probability of "
                                    f"improvement between them")
                continue
            p, low, high = probability_of_improvement_ci(
                [finals[a][e] for e in shared], [finals[b][e] for e in shared], reps,
                seed_for(seed, "improvement", *map(str, a), "|", *map(str, b)))
            improvement.append({"x": names[0], "y": names[1], "envs": " ".join(shared),
                                "runs_x": sum(len(finals[a][e]) for e in shared),
                                "runs_y": sum(len(finals[b][e]) for e in shared),
                                "p_x_above_y": p, "ci_low": low, "ci_high": high})
    return improvement


def aggregate(paths: Sequence[str], by: Sequence[str] = (), out: str | None = None, reps: int = DEFAULT_REPS,
              seed: int = 0, complete_only: bool = False, last: int = 1, episodes: int = 0) -> Report:
    """Read the runs under `paths`, write results.md, results.csv, curves_<env>.png and
    performance_profile.png into `out` (default <first path>/aggregate) and return the report."""
    _check_arguments(paths, reps, seed, last, episodes)
    score = Score(last, episodes)
    by = by_keys(by)
    runs, diverged, skipped, repeated = load_runs(paths, complete_only)
    groups = group_runs(runs, by)
    diverged_by_group: dict[tuple, list[RunRecord]] = {}
    for r in diverged:
        diverged_by_group.setdefault(group_key(r, by), []).append(r)
    out_dir = out or os.path.join(paths[0], "aggregate")
    if os.path.exists(out_dir) and not os.path.isdir(out_dir):
        raise AggregateError(f"--out {out_dir} is a file; pass a directory (it is created if missing).")
    os.makedirs(out_dir, exist_ok=True)

    profile_keys = sorted({(k[0], *k[2:]) for k in groups}, key=lambda k: [value_order(str(x)) for x in k])
    color = {k: i for i, k in enumerate(profile_keys)}  # one color per agent (x --by values) in every plot
    envs = sorted({k[1] for k in groups}, key=natural_key)
    rows = [summarize_group(key, members, by, reps, seed, len(diverged_by_group.get(key, [])), score)
            for key, members in groups.items()]
    notes = {key: group_notes(members, by, score) for key, members in groups.items()}
    for key, members in diverged_by_group.items():
        if key in notes:
            notes[key].append(f"{len(members)} run(s) diverged (an evaluation return became NaN or infinite), left "
                              f"out of the statistics: " + ", ".join(f"{r.label} at step {r.diverged_at}" for r in members))

    plots, curve_tables = _draw_curves(out_dir, groups, envs, by, color, notes, reps, seed)
    global_notes = [f"{group_name(key[0], key[1], by, key[2:])}: all {len(members)} run(s) diverged (an evaluation "
                    f"return became NaN or infinite), so it has no row: "
                    + ", ".join(f"{r.label} at step {r.diverged_at}" for r in members)
                    for key, members in diverged_by_group.items() if key not in groups]
    bounds = _score_bounds(groups, envs, score, global_notes)
    across, profiles = _across_envs(groups, diverged_by_group, profile_keys, envs, bounds, by, color, score, reps, seed,
                                    global_notes)
    plots.append(os.path.join(out_dir, "performance_profile.png"))
    plot_profile(plots[-1], TAUS, profiles, len(bounds), score.what)
    improvement = _improvement(groups, profile_keys, envs, by, score, reps, seed, global_notes)

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
    note_lines.append(f"Learning curves: IQM over runs with a {CONFIDENCE:.0%} bootstrap band (runs resampled at each "
                      f"eval step, as rliable does), solid at the eval steps all runs of a group have; where runs end at "
                      f"different steps the curve goes on dashed over the runs that went on, while at least "
                      f"{MIN_CURVE_RUNS} remain.")
    csv_path, md_path = os.path.join(out_dir, "results.csv"), os.path.join(out_dir, "results.md")
    write_csv(csv_path, rows, list(notes.values()), by)
    tables = [csv_path, *curve_tables]
    if improvement:
        tables.append(os.path.join(out_dir, "improvement.csv"))
        write_improvement_csv(tables[-1], improvement)
    markdown = render_markdown(paths, by, reps, seed, len(runs), rows, list(notes.values()), across, note_lines,
                               [*tables, *plots], improvement, score)
    with open(md_path, "w") as f:
        f.write(markdown)
    return Report(markdown, rows, [md_path, csv_path, *plots], out_dir)
