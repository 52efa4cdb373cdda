"""Golden runs: a short deterministic run of every agent, compared with the values committed in
tests/golden/<case>.json.

Each case (CASES) trains a few hundred env steps on a small real env (Pendulum-v1 for the
continuous agents, CartPole-v1 for DQN and the GA) with tiny networks, `deterministic=true`,
speed=plain and one TF thread, and records
  - a fingerprint of every variable the run's checkpoint holds (networks, targets, optimizer
    slots, counters, in-graph RNG states), by checkpoint key: float64 reductions (sum, sum of |w|,
    sum of squares, the dot product with a fixed seeded random vector and with its |r|), the
    values of small integer variables; and the SHA-256 digest of all of them together;
  - the last logged metrics: the last `update` record (a population's last `train` record), the
    last evaluation and the run's summary, without wall-clock figures.

The test asserts the reductions with rtol=1e-4 in weight terms (each may move as far as it would if
every weight moved by 1e-4 of itself; an Adam first moment, by 1e-4 of the gradients it averages), the
metrics with rtol=1e-4, and small integer variables exactly. It does not assert the digest, which is reported in the failure message for information:
oneDNN picks its kernels by the CPU's instruction set, so the bits may differ on another CPU while
the maths is the same. Measured: with oneDNN's kernels turned off (TF_ENABLE_ONEDNN_OPTS=0: other
kernels, other rounding) every case stays within 0.12x the tolerance, while a changed maths step
moves the farthest value by 1.8x (TD3's noise clip 0.5 -> 0.4, a clip that rarely binds; Adam's
epsilon 1e-8 -> 1e-7 moves SAC by 2x) to 10^8x (TD7's LAP switch inverted). A run that takes another
discrete branch (a greedy action's near-tie, a prioritized sample at a boundary) diverges at once:
the cases are short, and were picked so that none did under that test.

All cases run in one fresh subprocess (`python -m tests.golden --out FILE`): TF's thread pools
can only be sized before TF runs its first op, which other tests of the session have done.

Regenerate the committed values (every case, or the ones named) with

    uv run python -m tests.golden            # every case
    uv run python -m tests.golden sac td7    # only these

only when the maths changed on purpose, and review `git diff tests/golden/` before committing.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import subprocess
import sys
import time
import traceback

import numpy as np
import pytest

from registry import AGENTS

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GOLDEN_DIR = os.path.join(ROOT, "tests", "golden")
REGENERATE = "uv run python -m tests.golden"
RTOL = 1e-4  # a reduction's: see tolerance_scales; a metric's: RTOL * |value| + ATOL
ATOL = 1e-6
DOT_SEED = 20240601  # the fixed random vector each variable is dotted with
FORMAT = 1  # of the records: a golden file of another format is regenerated, not compared

# What every case shares: deterministic; speed=plain (the reference path: one compiled call per update,
# traced once, which is half the tracing of the fused paths; the speed presets' equality is
# tests/test_fast_paths.py's) with one TF thread; no records but the test's.
COMMON = ["seed=0", "deterministic=true", "speed=plain", "speed.threads.inter_op=1", "speed.threads.intra_op=1",
          "speed.batch_shards=1", "logger.progress=false", "logger.tensorboard=false", "logger.every=100",
          "checkpoint.every=0", "eval_episodes=1"]
# case name -> the overrides of its run, from each agent's entry in tests/registry.py: 200 updates each
# (the GA: generations of 8 until 1500 env steps)
CASES: dict[str, list[str]] = {case: overrides for entry in AGENTS.values() for case, overrides in entry.golden.items()}
# wall-clock figures: never part of a golden record
CLOCK = {"steps_per_second", "generations_per_second", "act_ms_per_step", "env_ms_per_step", "wall_time",
         "rollout_seconds", "update_seconds"}


# --- the runs (in the subprocess) -----------------------------------------------------------------

class Records:
    """A logger keeping the last record of each kind."""

    def __init__(self):
        self.last: dict[str, dict] = {}

    def log(self, kind, step, metrics):
        self.last[kind] = {"step": int(step), **{k: _number(v) for k, v in metrics.items()
                                                  if k not in CLOCK and np.ndim(v) == 0}}

    def close(self):
        pass


def _number(v):
    v = np.asarray(v).item()
    return v if isinstance(v, (bool, int)) else float(v)


def run_case(name: str) -> dict:
    """Train case `name` in this process; its golden record."""
    import keras
    from omegaconf import OmegaConf

    from training.builder import build_run
    from training.config import compose_config
    from training.families import family_of
    from training.session import LoopHooks

    keras.utils.clear_session()  # every case starts from the same Keras state, whichever ran before
    cfg = compose_config(COMMON + CASES[name])
    OmegaConf.resolve(cfg)
    run = build_run(cfg)
    records = Records()
    try:
        family = family_of(cfg, run)
        summary = family.train(records, family.initial_state(), LoopHooks())
    finally:
        run.close()
    metrics = {kind: records.last[kind] for kind in ("update", "train", "eval") if kind in records.last
               and not (kind == "train" and "update" in records.last)}  # off-policy: episode returns are in eval
    metrics["summary"] = {k: _number(v) for k, v in summary.items() if k in ("steps", "updates", "generations",
                                                                              "final_return", "best_return")}
    return {"format": FORMAT, "case": name, "overrides": CASES[name], "metrics": metrics,
            **fingerprint(run.learner.trackables())}


def checkpoint_values(trackables: dict) -> dict[str, np.ndarray]:
    """Every tensor a checkpoint of `trackables` holds, by checkpoint key (as the run's Checkpointer
    writes it), but the object graph and the save counter."""
    import tempfile

    import tensorflow as tf

    with tempfile.TemporaryDirectory() as tmp:
        path = tf.train.Checkpoint(**trackables).write(os.path.join(tmp, "agent"))
        reader = tf.train.load_checkpoint(path)
        keys = [k for k in reader.get_variable_to_shape_map()
                if k != "_CHECKPOINTABLE_OBJECT_GRAPH" and not k.startswith("save_counter")]
        return {k: np.asarray(reader.get_tensor(k)) for k in sorted(keys)}


def reductions(value: np.ndarray) -> dict:
    """A variable's fingerprint: float64 reductions; an integer variable's (a counter, an RNG's state)
    values too, when it is small."""
    w = np.asarray(value, np.float64).ravel()
    r = np.random.default_rng(DOT_SEED).standard_normal(w.size)
    found = {"shape": list(np.shape(value)), "dtype": str(value.dtype), "sum": float(w.sum()),
             "abs_sum": float(np.abs(w).sum()), "sum_sq": float(w @ w), "dot": float(w @ r),
             "abs_dot": float(np.abs(w) @ np.abs(r))}
    if np.issubdtype(value.dtype, np.integer) and value.size <= 8:
        found["values"] = np.asarray(value).ravel().tolist()
    return found


def fingerprint(trackables: dict) -> dict:
    values = checkpoint_values(trackables)
    digest = hashlib.sha256()
    for key, value in values.items():
        digest.update(key.encode())
        digest.update(np.ascontiguousarray(value).tobytes())
    return {"sha256": digest.hexdigest(), "variables": {k: reductions(v) for k, v in values.items()}}


def main(argv: list[str]) -> int:
    """`python -m tests.golden [case ...]`: write tests/golden/<case>.json for the cases named (all
    by default). `--out FILE`: write the records of those cases to FILE instead (what the test runs);
    a case that fails is recorded with its traceback there."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m tests.golden", description=main.__doc__)
    parser.add_argument("cases", nargs="*", metavar="case", help=f"of {', '.join(CASES)} (default: all)")
    parser.add_argument("--out", help="write all records to this file, leaving tests/golden/ alone")
    args = parser.parse_args(argv)
    names = args.cases or list(CASES)
    if unknown := [n for n in names if n not in CASES]:
        parser.error(f"no case {', '.join(unknown)}; the cases are {', '.join(CASES)}")
    records = {}
    for name in names:
        t0 = time.perf_counter()
        try:
            records[name] = run_case(name)
        except Exception:
            if not args.out:
                raise
            records[name] = {"case": name, "error": traceback.format_exc()}
        print(f"{name}: {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(records, f)
        return 0
    os.makedirs(GOLDEN_DIR, exist_ok=True)
    for name, record in records.items():
        with open(os.path.join(GOLDEN_DIR, f"{name}.json"), "w") as f:
            json.dump(record, f, indent=1, sort_keys=True)
            f.write("\n")
        print(f"wrote {os.path.relpath(os.path.join(GOLDEN_DIR, name + '.json'), ROOT)}", file=sys.stderr)
    return 0


# --- the comparison -------------------------------------------------------------------------------

INF = float("inf")


def compare(golden: dict, fresh: dict) -> list[tuple[float, str]]:
    """What differs between a golden record and a fresh one beyond the tolerances: (how many times
    the tolerance, one line), the farthest first; inf for what is missing or exact and differs."""
    problems = []
    gv, fv = golden["variables"], fresh["variables"]
    for key in sorted(set(gv) - set(fv)):
        problems.append((INF, f"variable {short(key)}: in the golden record, not in the run's checkpoint"))
    for key in sorted(set(fv) - set(gv)):
        problems.append((INF, f"variable {short(key)}: in the run's checkpoint, not in the golden record"))
    for key in sorted(set(gv) & set(fv)):
        g, f = gv[key], fv[key]
        if g["shape"] != f["shape"] or g["dtype"] != f["dtype"]:
            problems.append((INF, f"variable {short(key)}: {f['dtype']}{f['shape']}, golden {g['dtype']}{g['shape']}"))
            continue
        if "values" in g or "values" in f:  # a small integer variable (a counter, an RNG state): exact
            if g.get("values") != f.get("values"):
                problems.append((INF, f"variable {short(key)}: {f.get('values')} (golden {g.get('values')})"))
            continue
        exact = g["dtype"].startswith(("int", "uint", "bool"))
        worst, bad = 0.0, []
        for r, scale in tolerance_scales(g, gv.get(second_moment_of(key))).items():
            off = abs(f[r] - g[r])
            times = (INF if off else 0.0) if exact or scale == 0 else off / (RTOL * scale)
            if times > 1:
                worst = max(worst, times)
                bad.append(f"{r} {f[r]:.9g} (golden {g[r]:.9g})")
        if bad:
            problems.append((worst, f"variable {short(key)}: " + ", ".join(bad)))
    for kind in sorted(set(golden["metrics"]) | set(fresh["metrics"])):
        g, f = golden["metrics"].get(kind), fresh["metrics"].get(kind)
        if g is None or f is None:
            problems.append((INF, f"metrics {kind}: {'missing in the run' if f is None else 'not in the golden record'}"))
            continue
        for key in sorted(set(g) | set(f)):
            if key not in g or key not in f:
                problems.append((INF, f"metric {kind}/{key}: "
                                      f"{'not logged by the run' if key not in f else 'new, not in the golden record'}"))
            elif not np.isclose(f[key], g[key], rtol=RTOL, atol=ATOL, equal_nan=True):
                times = abs(f[key] - g[key]) / (RTOL * abs(g[key]) + ATOL)
                problems.append((times, f"metric {kind}/{key}: {f[key]!r} (golden {g[key]!r})"))
    return sorted(problems, key=lambda p: -p[0])


def short(key: str) -> str:
    return key.replace("/.ATTRIBUTES/VARIABLE_VALUE", "")


def second_moment_of(key: str) -> str | None:
    """The key of the second moment beside an Adam first moment: Keras keeps an optimizer's slots
    as `_variables/2i` (m of the i-th variable, from 2) and `_variables/2i+1` (its v)."""
    head, sep, tail = key.partition("/_variables/")
    index = tail.split("/", 1)[0]
    if not sep or not index.isdigit() or int(index) < 2 or int(index) % 2:
        return None
    return f"{head}/_variables/{int(index) + 1}/{tail.split('/', 1)[1]}"


def tolerance_scales(g: dict, second: dict | None = None) -> dict[str, float]:
    """How far each reduction may move, in units of RTOL: as far as it would if every weight moved by
    RTOL of itself. So a sum near 0 is held to the size of its terms (sum of |w|), not to itself.
    An Adam first moment m, beside its second moment v (same shape, never negative), is held to the
    size of the gradients it averages, sqrt(v), where that is larger than m: m is then a difference
    of gradients of both signs (the dueling head's advantage bias: entries x and -x), whose rounding
    another CPU's kernels move by more than RTOL of m itself (1.34x it on an AVX2 CPU against the
    golden records' AVX-512 one), while any change of the maths moves the weights as well."""
    scales = {"sum": g["abs_sum"], "abs_sum": g["abs_sum"], "sum_sq": 2 * g["sum_sq"], "dot": g["abs_dot"],
              "abs_dot": g["abs_dot"]}
    if second is None or second["shape"] != g["shape"] or second["sum"] != second["abs_sum"] or not g["abs_sum"]:
        return scales
    # sum_i sqrt(v_i) <= sqrt(n sum_i v_i): the sizes of m's terms, as sum |w| is a weight's
    widen = math.sqrt(max(1, int(np.prod(g["shape"]))) * second["abs_sum"]) / g["abs_sum"]
    return {r: scale * max(1.0, widen) for r, scale in scales.items()}


def failure_message(name: str, golden: dict, fresh: dict, problems: list[tuple[float, str]], limit: int = 20) -> str:
    worst = problems[0][0]
    lines = [f"golden run {name!r} differs from tests/golden/{name}.json in {len(problems)} value(s) beyond "
             f"rtol={RTOL:g}, the farthest {'missing or exact' if worst == INF else f'{worst:.3g}x the tolerance'} "
             f"(farthest first):",
             *(f"  {text}" for _, text in problems[:limit])]
    if len(problems) > limit:
        lines.append(f"  ... and {len(problems) - limit} more")
    lines.append("weights digest (information only; the bits may differ on another CPU): " +
                 ("identical" if golden["sha256"] == fresh["sha256"] else
                  f"differs (run {fresh['sha256'][:16]}, golden {golden['sha256'][:16]})"))
    lines.append(f"If (and only if) the maths changed on purpose, regenerate with `{REGENERATE} {name}` and review "
                 f"`git diff tests/golden/{name}.json`; otherwise the change altered what the agent computes.")
    return "\n".join(lines)


@pytest.fixture(scope="module")
def fresh(tmp_path_factory):
    """Every case's record from one fresh process, with the thread pools the cases ask for."""
    out = tmp_path_factory.mktemp("golden") / "records.json"
    proc = subprocess.run([sys.executable, "-m", "tests.golden", "--out", str(out)], cwd=ROOT, capture_output=True,
                          text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-5000:]
    with open(out) as f:
        return json.load(f)


@pytest.mark.parametrize("name", list(CASES))
def test_golden_run(name, fresh):
    path = os.path.join(GOLDEN_DIR, f"{name}.json")
    assert os.path.exists(path), f"no golden record {os.path.relpath(path, ROOT)}: create it with `{REGENERATE} {name}`"
    with open(path) as f:
        golden = json.load(f)
    record = fresh[name]
    if "error" in record:
        pytest.fail(f"golden run {name!r} failed:\n{record['error'][-5000:]}", pytrace=False)
    if golden.get("format") != FORMAT:
        pytest.fail(f"tests/golden/{name}.json is of record format {golden.get('format')}, the test's is {FORMAT}: "
                    f"regenerate it with `{REGENERATE} {name}`")
    if golden.get("overrides") != record["overrides"]:
        pytest.fail(f"tests/golden/{name}.json was recorded with other overrides ({golden.get('overrides')}) than "
                    f"CASES[{name!r}] ({record['overrides']}): regenerate it with `{REGENERATE} {name}`")
    problems = compare(golden, record)
    if problems:
        pytest.fail(failure_message(name, golden, record, problems), pytrace=False)
