"""The tables: a group's row (results.csv), improvement.csv and results.md."""
from __future__ import annotations

import csv
import math
import os
from typing import Sequence

import numpy as np

from analysis.groups import MIN_CI_RUNS, score_text
from analysis.runs import RunRecord, Score
from analysis.stats import CONFIDENCE, interval, iqm, mean_and_iqm, seed_for


def num(x: float) -> str:
    """A number as the tables show it: 4 significant figures or so, whatever its size."""
    if not math.isfinite(x):
        return str(x)
    a = abs(x)
    return f"{x:.1f}" if a >= 100 else f"{x:.2f}" if a >= 1 else f"{x:.3f}"


def ci_text(low: float, high: float) -> str:
    return f"[{num(low)}, {num(high)}]" if math.isfinite(low) and math.isfinite(high) else "n/a"


def md_table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c).replace("|", "\\|") for c in row) + " |" for row in rows]
    return "\n".join(lines)


def summarize_group(key: tuple, runs: list[RunRecord], by: Sequence[str], reps: int, seed: int, n_diverged: int = 0,
                    score: Score = Score()) -> dict:
    """The row of results.csv: the mean and IQM of the runs' scores (`Score.of`) with their
    bootstrap CIs over the runs (NaN with one run: resampling one score gives no interval)."""
    finals = np.array([score.of(r) for r in runs])
    (m_low, i_low), (m_high, i_high) = (np.nan, np.nan), (np.nan, np.nan)
    if len(runs) > 1:
        (m_low, i_low), (m_high, i_high) = interval([finals], mean_and_iqm, reps, seed_for(seed, "final", *key))
    return {
        "agent": key[0], "env": key[1], **dict(zip(by, key[2:])),
        "n_runs": len(runs), "n_incomplete": sum(not r.complete for r in runs), "n_diverged": n_diverged,
        "mean": float(np.mean(finals)), "mean_ci_low": float(m_low), "mean_ci_high": float(m_high),
        "iqm": float(iqm(finals)), "iqm_ci_low": float(i_low), "iqm_ci_high": float(i_high),
        "final_step_min": min(r.final_step for r in runs), "final_step_max": max(r.final_step for r in runs),
        "score_evals": 0 if score.episodes else score.last, "score_episodes": score.episodes, "env_id": runs[0].env_id or "",
    }


def write_csv(path: str, rows: list[dict], notes: list[list[str]], by: Sequence[str]) -> None:
    header = ["agent", "env", *by, "n_runs", "n_incomplete", "n_diverged", "mean", "mean_ci_low", "mean_ci_high", "iqm",
              "iqm_ci_low", "iqm_ci_high", "final_step_min", "final_step_max", "score_evals", "score_episodes", "env_id",
              "notes"]
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=header, extrasaction="ignore")
        writer.writeheader()
        for row, row_notes in zip(rows, notes):
            writer.writerow({**row, "notes": "; ".join(row_notes)})


def source_names(paths: Sequence[str]) -> list[str]:
    """The run or sweep directories a report read, relative to the directory that holds them all
    (`runs/td3_s0`, not the machine's `/home/me/runs/td3_s0`): a committed report names its sources
    as whoever reruns it lays them out, never one machine's absolute paths."""
    absolute = [os.path.abspath(p).rstrip(os.sep) for p in paths]
    if not absolute:
        return []
    root = os.path.commonpath([os.path.dirname(p) for p in absolute])
    return [os.path.relpath(p, root) for p in absolute]


def render_markdown(paths: Sequence[str], by: Sequence[str], reps: int, seed: int, n_runs: int,
                    rows: list[dict], row_notes: list[list[str]], across: list[list[str]],
                    note_lines: list[str], files: list[str], improvement: Sequence[dict] = (), score: Score = Score()) -> str:
    ci = f"{CONFIDENCE:.0%} CI"
    table = md_table(
        ["agent", "env", *by, "runs", "mean", f"mean {ci}", "IQM", f"IQM {ci}", "final step", "notes"],
        [[row["agent"], row["env"], *[row[k] for k in by],
          str(row["n_runs"]) + (f" (+{row['n_diverged']} diverged)" if row["n_diverged"] else ""), num(row["mean"]),
          ci_text(row["mean_ci_low"], row["mean_ci_high"]), num(row["iqm"]), ci_text(row["iqm_ci_low"], row["iqm_ci_high"]),
          str(row["final_step_max"]) if row["final_step_min"] == row["final_step_max"]
          else f"{row['final_step_min']}-{row['final_step_max']}",
          (f"{len(notes)} note(s)" + (f", {row['n_incomplete']} incomplete" if row["n_incomplete"] else "")) if notes else ""]
         for row, notes in zip(rows, row_notes)])
    md = [
        f"# Aggregate of {n_runs} run(s) in {len(rows)} group(s)",
        "",
        "Sources: " + ", ".join(f"`{p}`" for p in source_names(paths))
        + (f" (grouped by agent, env, {', '.join(by)})" if by else ""),
        "",
        score_text(score) + " The mean and IQM are over the runs' scores. IQM = interquartile mean "
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
        md_table(["group", "envs", "runs", "mean", f"mean {ci}", "IQM", f"IQM {ci}"], across),
        "",
        *([
            "## Probability of improvement",
            "",
            "P(X > Y): the mean over the envs both groups have of the probability that a run of X has a higher "
            "score than a run of Y (ties count half; P(Y > X) = 1 - P(X > Y)), as in rliable. Raw returns, no "
            "normalization. CI: stratified bootstrap, X's and Y's runs resampled independently within each env. "
            "0.5 means neither is ahead; a CI that excludes 0.5 is a difference these runs support.",
            "",
            md_table(["X", "Y", "envs", "runs (X, Y)", "P(X > Y)", ci],
                      [[d["x"], d["y"], d["envs"], f"{d['runs_x']}, {d['runs_y']}", f"{d['p_x_above_y']:.3f}",
                        ci_text(d["ci_low"], d["ci_high"])] for d in improvement]),
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



def write_improvement_csv(path: str, improvement: Sequence[dict]) -> None:
    write_rows(path, list(improvement[0]), improvement)


def write_rows(path: str, header: Sequence[str], rows: Sequence[dict]) -> None:
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(header))
        writer.writeheader()
        writer.writerows(rows)
