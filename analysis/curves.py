"""Learning curves: the IQM over a group's runs of the eval return at each eval step, with its
bootstrap band; solid where all runs have the step, dashed past it over the runs that went on."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from analysis.runs import RunRecord, steps_text
from analysis.stats import interval, iqm

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


def iqm_band(matrix: np.ndarray, reps: int, seed):
    """IQM over the runs (rows) at each step (column) and its bootstrap band, the runs resampled at
    each step apart, as rliable does (a step's band is drawn from the same distribution as with
    whole runs resampled).
    One run has no band (NaN, not drawn): resampling it would give a band of zero width."""
    point = iqm(matrix, axis=0)
    if len(matrix) < 2:
        return point, np.full(matrix.shape[1], np.nan), np.full(matrix.shape[1], np.nan)
    low, high = interval([matrix], lambda m: iqm(m, axis=0), reps, seed)
    return point, low, high


def _values_at(run: RunRecord, steps) -> np.ndarray:
    return run.returns[np.searchsorted(run.steps, steps)]


def latest_at(run: RunRecord, steps: np.ndarray) -> np.ndarray:
    """Each step's latest evaluation of the run: its return at its last eval step <= the step."""
    return run.returns[np.searchsorted(run.steps, steps, side="right") - 1]


def latest_evaluation_curve(runs: list[RunRecord], reps: int, seed: list[int]) -> Curve | None:
    """For runs that evaluate at steps of their own (a GA evaluates where a generation ends): the
    IQM over runs of each run's latest evaluation, at every eval step of any run from the last
    first evaluation to the first last one. None when those do not overlap."""
    start, end = max(int(r.steps[0]) for r in runs), min(int(r.steps[-1]) for r in runs)
    steps = np.array(sorted(s for r in runs for s in r.steps.tolist() if start <= s <= end), dtype=np.int64)
    if len(steps) == 0:
        return None
    steps = np.unique(steps)
    point, low, high = iqm_band(np.stack([latest_at(r, steps) for r in runs]), reps, seed)
    empty = np.zeros(0)
    note = (f"the runs evaluate at steps of their own (none shared): the curve is the IQM of each run's latest "
            f"evaluation at each step, from step {start} to {end}")
    return Curve(steps, point, low, high, len(runs), empty, empty, empty, empty, empty, note)


def learning_curve(runs: list[RunRecord], reps: int, seed: list[int]) -> Curve | None:
    """The IQM over runs of the eval return with its bootstrap band: solid over the eval steps all
    runs have; past the last of them, dashed over the runs that went on, in segments of steps with
    the same runs, where at least MIN_CURVE_RUNS remain. Runs that share no eval step get
    `latest_evaluation_curve`.
    `seed` seeds the solid part's band; a dashed segment's adds its first step."""
    have = [set(r.steps.tolist()) for r in runs]
    steps = np.array(sorted(set.intersection(*have)), dtype=np.int64)
    if len(steps) == 0:
        return latest_evaluation_curve(runs, reps, seed)
    point, low, high = iqm_band(np.stack([_values_at(r, steps) for r in runs]), reps, seed)

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
        p, lo, hi = iqm_band(np.stack([_values_at(runs[i], seg_steps) for i in members]), reps,
                             [*seed, int(seg_steps[0]) & 0xFFFFFFFF])
        for acc, values in zip(more, (seg_steps, p, lo, hi, [len(members)] * len(seg_steps))):
            acc.extend(values)

    notes = []
    gaps = sorted(s for s in set.union(*have) - set(steps.tolist()) if s < steps[-1])
    if gaps:
        notes.append(f"the runs' eval steps differ: steps {steps_text(gaps)} are not drawn (not all runs have them)")
    if segments or dropped:
        notes.append(f"learning curve solid to step {steps[-1]}, the last evaluation all {len(runs)} runs have")
    if segments:
        parts = ", ".join(f"{len(m)} runs to step {st[-1]}" for m, st in segments)
        notes.append(f"dashed beyond it over the runs that went on ({parts})")
    if dropped:
        notes.append(f"eval steps {steps_text(dropped)} have fewer than {MIN_CURVE_RUNS} runs and are not drawn")
    return Curve(steps, point, low, high, len(runs), *(np.asarray(a) for a in more), "; ".join(notes) or None)


CURVE_COLUMNS = ["group", "color", "env", "env_id", "part", "step", "iqm", "low", "high", "runs"]


def curve_rows(env: str, env_id: str | None, curves: list[tuple[str, int, Curve]]) -> list[dict]:
    """The curves of one env as CSV rows, one per (group, step), `part` solid or dashed, the floats
    in full (repr) so that a figure redrawn from them is the one aggregate.py drew."""
    rows = []
    for label, color, c in curves:
        parts = (("solid", c.steps, c.point, c.low, c.high, [c.n_runs] * len(c.steps)),
                 ("dashed", c.more_steps, c.more_point, c.more_low, c.more_high, c.more_n))
        for part, steps, point, low, high, n in parts:
            for row in zip(steps, point, low, high, n):
                rows.append(dict(zip(CURVE_COLUMNS, (label, color, env, env_id or "", part, int(row[0]),
                                                     *(repr(float(v)) for v in row[1:4]), int(row[4])))))
    return rows


def curves_from_rows(rows: list[dict]) -> tuple[str, str | None, list[tuple[str, int, Curve]]]:
    """curve_rows read back (from csv.DictReader): (env, env_id, [(label, color, Curve)])."""
    if not rows:
        raise ValueError("no curve rows")
    by_label: dict[str, dict] = {}
    for r in rows:
        g = by_label.setdefault(r["group"], {"color": int(r["color"]), "solid": [], "dashed": []})
        g[r["part"]].append((int(r["step"]), float(r["iqm"]), float(r["low"]), float(r["high"]), int(r["runs"])))
    curves = []
    for label, g in by_label.items():
        solid, dashed = (np.array(g[p], dtype=float).reshape(-1, 5).T for p in ("solid", "dashed"))
        curves.append((label, g["color"], Curve(
            solid[0].astype(np.int64), solid[1], solid[2], solid[3], int(solid[4][0]) if len(solid[4]) else 0,
            dashed[0].astype(np.int64), dashed[1], dashed[2], dashed[3], dashed[4].astype(np.int64), None)))
    return rows[0]["env"], rows[0]["env_id"] or None, curves
