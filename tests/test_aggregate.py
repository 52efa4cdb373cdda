"""aggregate.py: analysis/'s wrappers over rliable's statistics against direct computations, and
the CLI end to end on synthetic run dirs written in the format train.py writes (.hydra/*.yaml,
eval.csv, summary.json)."""
import csv
import json
import os
import subprocess
import sys

import numpy as np
import pytest
from omegaconf import OmegaConf
from scipy.stats import trim_mean

from analysis.curves import iqm_band
from analysis.report import aggregate
from analysis.runs import AggregateError
from analysis.stats import (
    interval,
    iqm,
    mean_and_iqm,
    minmax_normalize,
    performance_profile,
    probability_of_improvement,
    probability_of_improvement_ci,
    run_score_distribution,
)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV_IDS = {"hopper": "Hopper-v5", "walker2d": "Walker2d-v5", "pendulum": "Pendulum-v1"}
TARGETS = {"td3": "agents.td3.TD3", "ddpg": "agents.ddpg.DDPG"}
PNG = b"\x89PNG\r\n\x1a\n"


# ----------------------------------------------------------------------------------------------
# The statistics.


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 17, 100])
def test_iqm_matches_scipy_trim_mean(n):
    x = np.random.default_rng(n).normal(100.0, 30.0, size=n)
    assert iqm(x) == trim_mean(x, 0.25)
    m = np.random.default_rng(n + 1).normal(size=(n, 6))
    np.testing.assert_array_equal(iqm(m, axis=0), trim_mean(m, 0.25, axis=0))
    np.testing.assert_array_equal(iqm(m.T, axis=1), trim_mean(m.T, 0.25, axis=1))
    assert iqm(m, axis=None) == trim_mean(m, 0.25, axis=None)


def test_the_fast_statistics_give_rliables_numbers_bit_for_bit():
    """IQM, the score distribution and P(X > Y) are computed without scipy's per-call checks (a
    bootstrap calls them once per replicate): each equals rliable's own, to the last bit, on scores
    with ties, unequal runs and NaN (which goes to scipy's rules)."""
    from rliable import library, metrics

    g = np.random.default_rng(11)
    for trial in range(300):
        n, m = int(g.integers(1, 30)), int(g.integers(1, 12))
        a = g.normal(0.0, 10.0 ** g.uniform(-2, 4), size=(n, m))
        a = np.round(a) if trial % 3 == 0 else a  # ties
        if trial % 5 == 0:
            a[g.random(a.shape) < 0.2] = np.nan
        assert np.array_equal(iqm(a), metrics.aggregate_iqm(a), equal_nan=True)
        assert np.array_equal(iqm(a, axis=0), trim_mean(a, 0.25, axis=0), equal_nan=True)
        taus = np.linspace(np.nanmin(a) if np.isfinite(a).any() else 0.0, 1.0 + np.nanmax(a, initial=0.0), 17)
        tasks = [a[:, j][: int(g.integers(1, n + 1))] for j in range(m)]
        expected = np.mean([library.score_distributions(t, taus) for t in tasks], axis=0)
        np.testing.assert_array_equal(run_score_distribution(tasks, taus), expected)
        ys = [np.round(g.normal(0.0, 3.0, int(g.integers(1, 9)))) for _ in tasks]
        ys[0] = tasks[0].copy()  # rliable's shortcut for equal runs
        expected = np.mean([metrics.probability_of_improvement(x.reshape(-1, 1), y.reshape(-1, 1))
                            for x, y in zip(tasks, ys)])
        assert np.array_equal(probability_of_improvement(tasks, ys), expected, equal_nan=True)


def test_iqm_is_the_mean_below_four_runs_and_the_middle_half_above():
    for x in ([3.0], [1.0, 5.0], [1.0, 2.0, 9.0]):
        assert iqm(x) == pytest.approx(np.mean(x))  # floor(0.25 n) = 0: nothing trimmed
    assert iqm([100.0, 1.0, 2.0, -50.0]) == pytest.approx(1.5)  # n=4: one cut from each end
    assert iqm([0.0, 1.0, 2.0, 3.0, 1000.0]) == pytest.approx(2.0)  # n=5: one cut, mean of 1, 2, 3
    assert iqm(list(range(10))) == pytest.approx(np.mean(range(2, 8)))  # n=10: two cut from each end


def direct_bootstrap(tasks, statistic, reps, seed, alpha=0.05):
    """rliable's draws (numpy's global generator, seeded with `seed` by the wrapper; per replicate,
    per task in order, `np.random.choice(n_runs, n_runs)`), then a plain loop and the percentiles."""
    rs = np.random.RandomState(seed)
    values = []
    for _ in range(reps):
        resampled = []
        for t in tasks:
            resampled.append([t[i] for i in rs.choice(len(t), len(t))])
        values.append(statistic(resampled))
    return np.percentile(values, 100 * alpha / 2, axis=0), np.percentile(values, 100 * (1 - alpha / 2), axis=0)


def test_stratified_bootstrap_matches_a_direct_computation():
    g = np.random.default_rng(3)
    tasks = [g.normal(0, 1, 3), g.normal(5, 2, 5), g.normal(-1, 0.5, 4)]

    def pooled_iqm(s):
        return trim_mean(np.concatenate([np.asarray(t) for t in s]), 0.25)

    low, high = interval(tasks, lambda *s: iqm(np.concatenate(s)), 500, 11)
    d_low, d_high = direct_bootstrap(tasks, pooled_iqm, 500, 11)
    assert low == pytest.approx(d_low, abs=1e-12) and high == pytest.approx(d_high, abs=1e-12)
    point = iqm(np.concatenate(tasks))
    assert low <= point <= high and low < high

    # one task: the plain bootstrap over its runs; a vector statistic gives elementwise intervals
    x = g.normal(10, 3, 7)
    (m_low, i_low), (m_high, i_high) = interval([x], mean_and_iqm, 300, 5, confidence=0.9)
    (dm_low, di_low), (dm_high, di_high) = direct_bootstrap([x], lambda s: [np.mean(s[0]), trim_mean(s[0], 0.25)],
                                                            300, 5, alpha=0.1)
    assert (m_low, m_high, i_low, i_high) == pytest.approx((dm_low, dm_high, di_low, di_high), abs=1e-12)
    assert m_low <= np.mean(x) <= m_high and i_low <= iqm(x) <= i_high


def test_the_bootstrap_is_seeded_and_leaves_numpys_generator_alone():
    """rliable draws from numpy's global generator: the wrapper seeds it per interval (the same seed,
    the same interval; another seed, another) and puts back the state it found."""
    x = np.random.default_rng(8).normal(0, 1, 9)
    np.random.seed(123)
    before = np.random.get_state()[1].copy()
    first = interval([x], mean_and_iqm, 200, [0, 7])
    np.testing.assert_array_equal(np.random.get_state()[1], before)
    np.testing.assert_array_equal(np.concatenate(first), np.concatenate(interval([x], mean_and_iqm, 200, [0, 7])))
    assert not np.array_equal(np.concatenate(first), np.concatenate(interval([x], mean_and_iqm, 200, [1, 7])))


def test_stratified_bootstrap_resamples_within_each_task():
    # task means 0 and 100: a draw mixing the tasks would move the per-task means; stratified, it cannot
    tasks = [np.zeros(4), np.full(3, 100.0)]
    low, high = interval(tasks, lambda a, b: [np.mean(a), np.mean(b)], 200, 0)
    np.testing.assert_array_equal(low, [0.0, 100.0])
    np.testing.assert_array_equal(high, [0.0, 100.0])


def test_identical_scores_collapse_the_interval_to_the_point():
    x = np.full(6, -1234.5)
    (m_low, i_low), (m_high, i_high) = interval([x], mean_and_iqm, 200, 0)
    assert m_low == m_high == np.mean(x) and i_low == i_high == iqm(x) == -1234.5


def test_performance_profile_matches_a_direct_computation():
    g = np.random.default_rng(4)
    tasks = [g.uniform(0, 1, 3), g.uniform(0, 1, 3), g.uniform(0, 1, 5)]
    taus = np.linspace(0, 1, 21)

    def direct(scores_by_task):
        out = []
        for tau in taus:
            fractions = [sum(1 for s in task if s > tau) / len(task) for task in scores_by_task]
            out.append(sum(fractions) / len(fractions))
        return np.array(out)

    np.testing.assert_allclose(run_score_distribution(tasks, taus), direct(tasks))
    point, low, high = performance_profile(tasks, taus, 300, 9)
    d_low, d_high = direct_bootstrap(tasks, direct, 300, 9)
    np.testing.assert_allclose(point, direct(tasks))
    np.testing.assert_allclose(low, d_low, atol=1e-12)
    np.testing.assert_allclose(high, d_high, atol=1e-12)
    assert np.all(low <= point + 1e-12) and np.all(point <= high + 1e-12)
    # equal runs per task: the fraction of all runs
    equal = tasks[:2]
    pooled = np.concatenate(equal)
    np.testing.assert_allclose(run_score_distribution(equal, taus), [np.mean(pooled > t) for t in taus])


def test_one_run_per_task_or_per_curve_has_no_band():
    """Resampling a single run gives a band of zero width, which would read as certainty."""
    point, low, high = performance_profile([[0.2], [0.7]], np.linspace(0, 1, 5), 100, 0)
    np.testing.assert_allclose(point, [1.0, 0.5, 0.5, 0.0, 0.0])
    assert np.isnan(low).all() and np.isnan(high).all()
    point, low, high = iqm_band(np.array([[1.0, 2.0, 3.0]]), 100, 0)
    np.testing.assert_array_equal(point, [1.0, 2.0, 3.0])
    assert np.isnan(low).all() and np.isnan(high).all()
    _, low, high = iqm_band(np.array([[1.0, 2.0], [3.0, 5.0]]), 100, 0)
    assert np.all(low < high)  # two runs: a band


def test_curve_band_matches_a_direct_computation():
    """A learning curve's band: the IQM over runs at each eval step, the runs drawn at each step apart
    (rliable's draws for a runs x steps array: `np.random.choice(n_runs, (n_runs, n_steps))`)."""
    m = np.random.default_rng(6).normal(0, 1, (6, 4))
    point, low, high = iqm_band(m, 300, 2)
    rs = np.random.RandomState(2)
    values = [trim_mean(m[rs.choice(6, (6, 4)), np.arange(4)], 0.25, axis=0) for _ in range(300)]
    np.testing.assert_array_equal(point, trim_mean(m, 0.25, axis=0))
    np.testing.assert_allclose(low, np.percentile(values, 2.5, axis=0), atol=1e-12)
    np.testing.assert_allclose(high, np.percentile(values, 97.5, axis=0), atol=1e-12)
    assert np.all(low <= point) and np.all(point <= high)


def test_runs_that_share_no_eval_step_get_each_runs_latest_evaluation():
    """A GA evaluates where its generations end, at steps of each run's own: at every eval step
    between the last first evaluation and the first last one, each run counts with its latest."""
    from types import SimpleNamespace

    from analysis.curves import learning_curve

    a = SimpleNamespace(steps=np.array([100, 250, 400]), returns=np.array([1.0, 2.0, 3.0]))
    b = SimpleNamespace(steps=np.array([150, 300, 380]), returns=np.array([10.0, 20.0, 30.0]))
    curve = learning_curve([a, b], 100, [0])
    np.testing.assert_array_equal(curve.steps, [150, 250, 300, 380])
    # a: 1 (its eval at 100), 2, 2, 2; b: 10, 10, 20, 30; two runs: the IQM is their mean
    np.testing.assert_allclose(curve.point, [5.5, 6.0, 11.0, 16.0])
    assert "latest evaluation" in curve.note and curve.more_steps.size == 0
    c = SimpleNamespace(steps=np.array([500, 600]), returns=np.array([0.0, 0.0]))
    assert learning_curve([a, c], 100, [0]) is None  # a ends before c begins


def test_probability_of_improvement_against_a_direct_count():
    """rliable's P(X > Y): per task, the share of (x, y) pairs with x above y, ties counting half;
    then the mean over tasks (not over all pairs pooled)."""
    x = [[1.0, 3.0, 5.0], [10.0, 10.0]]
    y = [[2.0, 3.0], [0.0, 10.0, 20.0, 30.0]]
    # task 1: 1 beats none, 3 beats 2 and ties 3, 5 beats both: (0 + 1.5 + 2) / 6; task 2: each 10 beats 0, ties 10: 3 / 8
    assert probability_of_improvement(x, y) == pytest.approx(((0 + 1.5 + 2) / 6 + 3 / 8) / 2)
    assert probability_of_improvement(x, y) + probability_of_improvement(y, x) == pytest.approx(1.0)
    g = np.random.default_rng(5)
    x = [g.normal(1.0, 1.0, 6), g.normal(0.0, 1.0, 4)]
    y = [g.normal(0.0, 1.0, 5), g.normal(0.0, 1.0, 4)]

    def direct(tasks):
        xs, ys = tasks[:2], tasks[2:]
        return np.mean([np.mean([1.0 if a > b else 0.5 if a == b else 0.0 for a in xt for b in yt]) for xt, yt in zip(xs, ys)])

    p, low, high = probability_of_improvement_ci(x, y, 300, 3)
    d_low, d_high = direct_bootstrap([*x, *y], direct, 300, 3)  # X's and Y's runs: strata of their own
    assert p == pytest.approx(direct([*x, *y]))
    assert low == pytest.approx(d_low) and high == pytest.approx(d_high) and low <= p <= high
    p, low, high = probability_of_improvement_ci([[1.0], [2.0]], [[0.0], [2.0]], 100, 0)
    assert p == pytest.approx(0.75) and np.isnan(low) and np.isnan(high)  # one run of each per task: no interval


def test_minmax_normalize():
    np.testing.assert_allclose(minmax_normalize([-10.0, 0.0, 30.0], -10.0, 30.0), [0.0, 0.25, 1.0])
    assert np.isnan(minmax_normalize([5.0, 5.0], 5.0, 5.0)).all()  # no range: undefined, not pinned at 1


# ----------------------------------------------------------------------------------------------
# Synthetic run dirs, in the format train.py writes.


def make_run(run_dir, agent="td3", env="hopper", seed=0, returns=(0.0, 10.0, 20.0), eval_every=1000, complete=True,
             target=None, env_id=None, buffer="uniform", tau=0.005, overrides=(), eval_csv=True, extra_cfg=None):
    hydra = os.path.join(run_dir, ".hydra")
    os.makedirs(hydra)
    steps = [i * eval_every for i in range(len(returns))]
    cfg = {"seed": seed, "total_steps": 3000, "batch_size": 256, "compile": "graph",
           "agent": {"_target_": target or TARGETS[agent], "tau": tau, "compile": "${compile}"},
           "buffer": {"_target_": f"buffers.{buffer}.Replay", "capacity": 1000000},
           "env": {"id": env_id or ENV_IDS[env], "total_steps": 3000}, **(extra_cfg or {})}
    OmegaConf.save(OmegaConf.create(cfg), os.path.join(hydra, "config.yaml"))
    choices = {"env": env, "buffer": buffer, "network": "mlp", "agent": agent, "tuned": f"{agent}_{env}",
               "hydra/launcher": "basic"}
    OmegaConf.save(OmegaConf.create({"hydra": {"runtime": {"choices": choices}}}), os.path.join(hydra, "hydra.yaml"))
    lines = [f"agent={agent}", f"env={env}", f"seed={seed}", "progress=false", *overrides]
    OmegaConf.save(OmegaConf.create(lines), os.path.join(hydra, "overrides.yaml"))
    if eval_csv:
        with open(os.path.join(run_dir, "eval.csv"), "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["step", "return_mean", "return_std", "return_min", "return_max", "length_mean", "wall_time"])
            for i, (step, ret) in enumerate(zip(steps, returns)):
                w.writerow([step, ret, 1.0, ret - 1, ret + 1, 1000.0, 0.5 * i])
    if complete:
        summary = {"stopped": False, "steps": steps[-1], "updates": steps[-1], "final_return": returns[-1],
                   "best_return": max(returns), "wall_time": 9.0, "steps_per_second": 100.0, "signal": None,
                   "run_dir": run_dir, "agent": agent, "env": env, "env_id": env_id or ENV_IDS[env], "seed": seed,
                   "overrides": lines}
        with open(os.path.join(run_dir, "summary.json"), "w") as f:
            json.dump(summary, f)


def make_sweep(root, agents=("td3", "ddpg"), envs=("hopper", "walker2d"), seeds=(0, 1, 2), **kw):
    """multirun/<date>/<time>/<job>/ with one run per agent x env x seed; returns {(agent, env): finals}."""
    os.makedirs(root)
    with open(os.path.join(root, "multirun.yaml"), "w") as f:
        f.write("hydra:\n  mode: MULTIRUN\n")
    finals, job = {}, 0
    for agent in agents:
        for env in envs:
            for seed in seeds:
                base = {"td3": 1000.0, "ddpg": 600.0}[agent] * (1 if env == "hopper" else 2)
                final = base + 37.0 * seed ** 2 - 11.0 * seed
                make_run(os.path.join(root, str(job)), agent, env, seed, (0.0, base / 2 + seed, final), **kw)
                finals.setdefault((agent, env), []).append(final)
                job += 1
    return finals


def cli(*args):
    return subprocess.run([sys.executable, "aggregate.py", *map(str, args)], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)


def read_rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


# ----------------------------------------------------------------------------------------------
# End to end.


def test_end_to_end_two_agents_two_envs_three_seeds(tmp_path):
    sweep = str(tmp_path / "multirun" / "2026-11-21" / "12-00-00")
    finals = make_sweep(sweep)
    # a second sweep dir: a td3/hopper run stopped early (no summary.json, ends at step 1000),
    # a run without eval.csv and one with an empty eval.csv
    other = str(tmp_path / "multirun" / "2026-11-21" / "13-00-00")
    make_run(os.path.join(other, "0"), "td3", "hopper", seed=3, returns=(0.0, 700.0), complete=False)
    finals[("td3", "hopper")].append(700.0)
    make_run(os.path.join(other, "1"), "td3", "hopper", seed=4, eval_csv=False, complete=False)
    make_run(os.path.join(other, "2"), "td3", "hopper", seed=5, returns=(), complete=False)

    proc = cli(sweep, other, "--reps", 300)
    assert proc.returncode == 0, proc.stderr
    out = os.path.join(sweep, "aggregate")
    rows = read_rows(os.path.join(out, "results.csv"))
    assert [(r["agent"], r["env"]) for r in rows] == [("ddpg", "hopper"), ("ddpg", "walker2d"),
                                                      ("td3", "hopper"), ("td3", "walker2d")]
    for r in rows:
        x = np.array(finals[(r["agent"], r["env"])])
        assert int(r["n_runs"]) == len(x)
        assert float(r["mean"]) == pytest.approx(np.mean(x), rel=1e-12)
        assert float(r["iqm"]) == pytest.approx(trim_mean(x, 0.25), rel=1e-12)
        assert float(r["mean_ci_low"]) <= float(r["mean"]) <= float(r["mean_ci_high"])
        assert float(r["iqm_ci_low"]) <= float(r["iqm"]) <= float(r["iqm_ci_high"])
    td3_hopper = rows[2]
    assert td3_hopper["n_incomplete"] == "1" and td3_hopper["final_step_min"] == "1000" and td3_hopper["final_step_max"] == "2000"
    assert float(td3_hopper["iqm"]) != pytest.approx(np.mean(finals[("td3", "hopper")]))  # 4 runs: the ends are cut

    for name in ("curves_hopper.png", "curves_walker2d.png", "performance_profile.png"):
        path = os.path.join(out, name)
        assert os.path.getsize(path) > 0
        with open(path, "rb") as f:
            assert f.read(8) == PNG

    # the points of each curve, in curves_<env>.csv: td3 on hopper is solid over 4 runs to step
    # 1000 (IQM of 500, 501, 502, 700: the middle two), dashed over the 3 that went on to 2000
    curve = [r for r in read_rows(os.path.join(out, "curves_hopper.csv")) if r["group"].startswith("td3")]
    assert [(r["part"], r["step"], r["runs"]) for r in curve] == [("solid", "0", "4"), ("solid", "1000", "4"),
                                                                   ("dashed", "2000", "3")]
    assert float(curve[1]["iqm"]) == pytest.approx(501.5) and float(curve[0]["iqm"]) == 0.0
    assert float(curve[2]["iqm"]) == pytest.approx(np.mean(finals[("td3", "hopper")][:3]))
    assert float(curve[1]["low"]) <= 501.5 <= float(curve[1]["high"])
    # and the figure redrawn from it is aggregate.py's, byte for byte
    from analysis.curves import curves_from_rows
    from analysis.plots import plot_curves

    plot_curves(str(tmp_path / "redrawn.png"), *curves_from_rows(read_rows(os.path.join(out, "curves_hopper.csv"))))
    with open(os.path.join(out, "curves_hopper.png"), "rb") as f:
        assert (tmp_path / "redrawn.png").read_bytes() == f.read()
    with open(os.path.join(out, "results.md")) as f:
        md = f.read()
    sources = next(line for line in md.splitlines() if line.startswith("Sources: "))
    assert str(tmp_path) not in sources and "`" in sources  # named as laid out, not by this machine's paths
    for text in (proc.stdout, md):
        assert "incomplete" in text and "seed=3 (13-00-00/0) at step 1000" in text
        assert "runs end at steps 2000 (3 runs), 1000 (1 run, incomplete: seed=3 (13-00-00/0))" in text
        assert "learning curve solid to step 1000, the last evaluation all 4 runs have; dashed beyond it over " \
               "the runs that went on (3 runs to step 2000)" in text
        assert "13-00-00/1: no eval.csv" in text and "13-00-00/2: eval.csv holds no evaluation rows" in text
        assert "min-max" in text
    assert "| td3 | hopper | 4 |" in proc.stdout
    assert f"wrote {os.path.join(out, 'results.csv')}" in proc.stdout

    # reproducible: the same seed gives the same file; --complete-only leaves the stopped run out
    again = str(tmp_path / "again")
    assert cli(sweep, other, "--reps", 300, "--out", again).returncode == 0
    with open(os.path.join(out, "results.csv")) as a, open(os.path.join(again, "results.csv")) as b:
        assert a.read() == b.read()
    proc = cli(sweep, other, "--reps", 300, "--out", again, "--complete-only")
    assert proc.returncode == 0, proc.stderr
    assert "left out by --complete-only" in proc.stdout
    rows = read_rows(os.path.join(again, "results.csv"))
    assert rows[2]["n_runs"] == "3" and float(rows[2]["mean"]) == pytest.approx(np.mean(finals[("td3", "hopper")][:3]))


def test_diverged_runs_are_counted_and_left_out_of_the_statistics(tmp_path):
    root = str(tmp_path / "sweep")
    for seed, returns in enumerate([(0.0, 100.0, 300.0), (0.0, 200.0, 500.0), (0.0, 900.0, float("nan")),
                                    (0.0, 150.0, 400.0)]):
        make_run(os.path.join(root, f"td3_{seed}"), "td3", "hopper", seed, returns)
    for seed in (0, 1):  # every ddpg run diverged
        make_run(os.path.join(root, f"ddpg_{seed}"), "ddpg", "hopper", seed, (0.0, float("inf")))
    report = aggregate([root], reps=200)
    assert [(r["agent"], r["n_runs"], r["n_diverged"]) for r in report.rows] == [("td3", 3, 1)]
    # the statistics are those of the three runs that did not diverge, not of the diverged run's last finite eval
    assert report.rows[0]["mean"] == pytest.approx(400.0)
    assert report.markdown.count("| 3 (+1 diverged) |") == 2  # the group's row and the across-env row
    assert "seed=2 (sweep/td3_2) at step 2000" in report.markdown
    assert "ddpg/hopper: all 2 run(s) diverged" in report.markdown and "at step 1000" in report.markdown


def test_a_run_stopped_on_a_non_finite_loss_counts_as_diverged(tmp_path):
    # train.py stops a run at its first NaN loss, before an evaluation sees it: its evaluations are
    # all finite, and its summary.json says where it diverged
    root = str(tmp_path / "sweep")
    for seed in (0, 1):
        make_run(os.path.join(root, f"td3_{seed}"), "td3", "hopper", seed, (0.0, 100.0, 300.0))
    make_run(os.path.join(root, "td3_2"), "td3", "hopper", 2, (0.0, 900.0))
    path = os.path.join(root, "td3_2", "summary.json")
    with open(path) as f:
        summary = json.load(f)
    with open(path, "w") as f:
        json.dump({**summary, "steps": 1500, "diverged_at": 1500, "final_return": float("nan")}, f)
    report = aggregate([root], reps=200)
    assert [(r["agent"], r["n_runs"], r["n_diverged"]) for r in report.rows] == [("td3", 2, 1)]
    assert report.rows[0]["mean"] == pytest.approx(300.0)  # not the diverged run's last finite evaluation
    assert "seed=2 (sweep/td3_2) at step 1500" in report.markdown


def test_aggregate_notes_runs_pooled_across_code_or_library_versions(tmp_path):
    """A group whose runs' summary.json name different TensorFlow versions or commits is noted with
    each value; one whose runs agree is not; a run that records none is named."""
    root = str(tmp_path / "sweep")
    made = [("td3", {"tensorflow": "2.21.0", "numpy": "2.4.6"}, "a" * 40), ("td3", {"tensorflow": "2.20.0", "numpy": "2.4.6"}, "a" * 40),
            ("ddpg", {"tensorflow": "2.21.0"}, "b" * 40), ("ddpg", {"tensorflow": "2.21.0"}, "b" * 40), ("ddpg", None, None)]
    for i, (agent, versions, commit) in enumerate(made):
        run = os.path.join(root, f"{agent}_{i}")
        make_run(run, agent, "hopper", i, (0.0, 10.0 * i))
        if versions:
            path = os.path.join(run, "summary.json")
            with open(path) as f:
                summary = json.load(f)
            with open(path, "w") as f:
                json.dump({**summary, "versions": versions, "code": {"commit": commit, "dirty": False}}, f)
    text = aggregate([root], reps=50).markdown
    assert "td3/hopper: runs made by different code or libraries, tensorflow (2.20.0: 1 run(s), 2.21.0: 1 run(s))" in text
    assert "numpy" not in text and "commit" not in text  # the same in every run of its group
    assert "ddpg/hopper: 1 run(s) record no code or library versions" in text and "seed=4" in text
    assert "ddpg/hopper: runs made by different" not in text


def test_a_summary_older_than_the_last_evaluation_is_incomplete(tmp_path):
    root = str(tmp_path / "sweep")
    make_run(os.path.join(root, "0"), seed=0, returns=(0.0, 10.0, 20.0))
    make_run(os.path.join(root, "1"), seed=1, returns=(0.0, 10.0, 30.0, 40.0))  # resumed to 3000, crashed after
    with open(os.path.join(root, "1", "summary.json")) as f:
        summary = json.load(f)
    with open(os.path.join(root, "1", "summary.json"), "w") as f:
        json.dump({**summary, "steps": 2000}, f)  # written when it first finished at 2000
    report = aggregate([root], reps=50)
    assert report.rows[0]["n_incomplete"] == 1
    assert "summary.json is from step 2000 but eval.csv goes on to step 3000" in report.markdown
    report = aggregate([root], reps=50, out=str(tmp_path / "complete"), complete_only=True)
    assert report.rows[0]["n_runs"] == 1 and report.rows[0]["mean"] == 20.0


def test_one_run_gets_no_interval_and_few_runs_a_warning(tmp_path):
    root = str(tmp_path / "sweep")
    make_run(os.path.join(root, "solo"), "ddpg", "hopper", 0, (0.0, 77.0))
    for seed in range(3):
        make_run(os.path.join(root, f"td3_{seed}"), "td3", "hopper", seed, (0.0, 100.0 * (seed + 1)))
    report = aggregate([root], reps=100)
    solo, trio = report.rows
    assert solo["n_runs"] == 1 and np.isnan(solo["mean_ci_low"]) and np.isnan(solo["iqm_ci_high"])
    assert trio["n_runs"] == 3 and trio["mean_ci_low"] < 200.0 < trio["mean_ci_high"]
    assert "| 77.00 | n/a |" in report.markdown
    assert "ddpg/hopper: one run: no confidence interval" in report.markdown
    assert "td3/hopper: 3 runs: bootstrap CIs from fewer than 5 runs are too narrow" in report.markdown


def test_an_env_where_every_run_scores_the_same_is_left_out_across_envs(tmp_path):
    root = str(tmp_path / "sweep")
    for agent, scores in (("td3", (300.0, 500.0)), ("ddpg", (100.0, 200.0))):
        for seed, final in enumerate(scores):
            make_run(os.path.join(root, f"{agent}_h{seed}"), agent, "hopper", seed, (0.0, final))
            make_run(os.path.join(root, f"{agent}_w{seed}"), agent, "walker2d", seed, (0.0, 1000.0))  # all alike
    report = aggregate([root], reps=100)
    assert "walker2d: every run has the same score (1000.0)" in report.markdown
    across = report.markdown.split("## Across envs")[1].split("## Notes")[0]
    # normalized on hopper alone: ddpg (0, 0.25), td3 (0.5, 1); pinning walker2d at 1 would lift both means
    assert "| ddpg | 1 | 2 | 0.125 |" in across and "| td3 | 1 | 2 | 0.750 |" in across


def test_a_run_with_env_id_set_on_the_command_line_goes_by_that_id(tmp_path):
    root = str(tmp_path / "sweep")
    for seed in (0, 1):  # the pendulum group supplied the defaults, env.id named the env
        make_run(os.path.join(root, str(seed)), "td3", "pendulum", seed, (0.0, 10.0 * seed),
                 env_id="MountainCarContinuous-v0", overrides=["env.id=MountainCarContinuous-v0"])
    make_run(os.path.join(root, "2"), "td3", "pendulum", 0, (0.0, 5.0))
    report = aggregate([root], reps=50)
    assert [(r["env"], r["n_runs"]) for r in report.rows] == [("MountainCarContinuous-v0", 2), ("pendulum", 1)]


def test_by_keys_from_choices_overrides_and_config(tmp_path):
    root = str(tmp_path / "sweep")
    # td3 on pendulum, 2 buffers x 2 tau values x 2 seeds; tau set on the command line for half of them
    job = 0
    for buffer in ("uniform", "prioritized"):
        for tau in (0.005, 0.01):
            for seed in (0, 1):
                overrides = [f"buffer={buffer}"] + ([f"agent.tau={tau}"] if tau != 0.005 else [])
                make_run(os.path.join(root, str(job)), env="pendulum", seed=seed, buffer=buffer, tau=tau,
                         returns=(0.0, 100.0 * job), overrides=overrides)
                job += 1
    report = aggregate([root], by=["buffer"], reps=50)
    assert [(r["buffer"], r["n_runs"]) for r in report.rows] == [("prioritized", 4), ("uniform", 4)]
    assert "runs differ in agent.tau (0.005: 2 run(s), 0.01: 2 run(s)); split them with --by agent.tau" in report.markdown
    report = aggregate([root], by=["buffer,agent.tau"], reps=50, out=str(tmp_path / "out"))
    assert [(r["buffer"], r["agent.tau"], r["n_runs"]) for r in report.rows] == [
        ("prioritized", "0.005", 2), ("prioritized", "0.01", 2), ("uniform", "0.005", 2), ("uniform", "0.01", 2)]
    assert "runs differ" not in report.markdown
    header = read_rows(os.path.join(str(tmp_path / "out"), "results.csv"))[0].keys()
    assert list(header)[:4] == ["agent", "env", "buffer", "agent.tau"]
    # a config key with an interpolation (agent.compile: ${compile}) resolves
    report = aggregate([root], by=["agent.compile"], reps=20, out=str(tmp_path / "out2"))
    assert report.rows[0]["agent.compile"] == "graph"


def test_by_key_with_a_value_for_the_runs_that_lack_it(tmp_path):
    # train.py's runs have no `implementation` key; benchmarks/sb3_learning.py's say stable-baselines3
    root = str(tmp_path / "runs")
    for seed in (0, 1):
        make_run(os.path.join(root, f"tfrl_{seed}"), seed=seed, returns=(0.0, 100.0 + seed))
        make_run(os.path.join(root, f"sb3_{seed}"), seed=seed, returns=(0.0, 50.0 + seed),
                 extra_cfg={"implementation": "stable-baselines3"})
    report = aggregate([root], by=["implementation"], reps=50)
    assert [(r["implementation"], r["n_runs"]) for r in report.rows] == [("(unset)", 2), ("stable-baselines3", 2)]
    report = aggregate([root], by=["implementation=tfrl"], reps=50)
    assert [(r["implementation"], r["n_runs"], r["mean"]) for r in report.rows] == [
        ("stable-baselines3", 2, 50.5), ("tfrl", 2, 100.5)]
    assert "--by implementation is unset in 2 run(s), shown as tfrl (--by implementation=tfrl)" in report.markdown
    assert "td3 (implementation=tfrl)" in report.markdown and "(unset)" not in report.markdown
    # a value for the runs that lack a key does not make a key that no run has
    with pytest.raises(AggregateError, match="--by implemntation: no run has this key"):
        aggregate([root], by=["implemntation=tfrl"], reps=50)


# ----------------------------------------------------------------------------------------------
# Bad input: exit code 2, one clear message, no traceback.


def assert_usage_error(proc, *fragments):
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert proc.stderr.startswith("error: ") and "Traceback" not in proc.stderr, proc.stderr
    for fragment in fragments:
        assert fragment in proc.stderr, proc.stderr


def test_bad_input(tmp_path):
    assert_usage_error(cli(tmp_path / "nope"), "nope does not exist", "pass a sweep dir")
    os.makedirs(tmp_path / "empty" / "sub")
    assert_usage_error(cli(tmp_path / "empty"), "no run directories (with .hydra/config.yaml) found under",
                       "pass a sweep dir (multirun/<date>/<time>) or a run dir")
    # two sweeps where agent=td3 meant different classes
    make_sweep(str(tmp_path / "a"), agents=("td3",), envs=("hopper",))
    make_sweep(str(tmp_path / "b"), agents=("td3",), envs=("hopper",), target="agents.td3_v2.TD3")
    assert_usage_error(cli(tmp_path / "a", tmp_path / "b"), "td3/hopper", "agents.td3.TD3", "agents.td3_v2.TD3",
                       str(tmp_path / "b"), "--by", "separately")
    # the same env name, different env ids
    make_sweep(str(tmp_path / "c"), agents=("td3",), envs=("hopper",), env_id="Hopper-v4")
    assert_usage_error(cli(tmp_path / "a", tmp_path / "c"), "env ids", "Hopper-v4", "Hopper-v5")
    assert_usage_error(cli(tmp_path / "a", "--by", "agent.nonexistent"), "--by agent.nonexistent", "no run has this key")
    assert_usage_error(cli(tmp_path / "a", "--seed", -1), "--seed -1", "from 0 to 2**32 - 1")
    # the mixed sweeps aggregate once split by the class
    proc = cli(tmp_path / "a", tmp_path / "b", "--by", "agent._target_", "--reps", 50)
    assert proc.returncode == 0, proc.stderr


def test_unequal_runs_per_env_are_noted(tmp_path):
    """The across-env mean weighs envs equally and the pooled IQM by their runs; with unequal runs
    per env the two weigh differently, which a reader has to be told."""
    root = str(tmp_path / "sweep")
    for seed in range(3):
        make_run(os.path.join(root, f"h{seed}"), "td3", "hopper", seed, (0.0, 10.0 * seed, 20.0 + seed))
    for seed in range(2):
        make_run(os.path.join(root, f"w{seed}"), "td3", "walker2d", seed, (0.0, 5.0, 30.0 + 7 * seed))
    report = aggregate([root], reps=50)
    assert "td3 has unequal runs per env (hopper 3, walker2d 2)" in report.markdown
    for seed in range(2, 3):
        make_run(os.path.join(root, f"w{seed}"), "td3", "walker2d", seed, (0.0, 5.0, 30.0 + 7 * seed))
    assert "unequal runs per env" not in aggregate([root], reps=50).markdown


def test_probability_of_improvement_between_agents_in_the_report(tmp_path):
    root = str(tmp_path / "sweep")
    finals = {("td3", "hopper"): [300.0, 320.0, 280.0], ("ddpg", "hopper"): [100.0, 290.0, 120.0],
              ("td3", "walker2d"): [50.0, 60.0], ("ddpg", "walker2d"): [55.0, 70.0]}
    for (agent, env), values in finals.items():
        for seed, final in enumerate(values):
            make_run(os.path.join(root, f"{agent}_{env}_{seed}"), agent, env, seed, (0.0, final / 2, final))
    report = aggregate([root], reps=200)
    rows = read_rows(os.path.join(report.out_dir, "improvement.csv"))
    assert [(r["x"], r["y"], r["envs"], r["runs_x"], r["runs_y"]) for r in rows] == [("ddpg", "td3", "hopper walker2d", "5", "5")]
    expected = probability_of_improvement([finals[("ddpg", "hopper")], finals[("ddpg", "walker2d")]],
                                          [finals[("td3", "hopper")], finals[("td3", "walker2d")]])
    assert float(rows[0]["p_x_above_y"]) == pytest.approx(expected)  # (1/9 + 3/4) / 2
    assert float(rows[0]["ci_low"]) <= expected <= float(rows[0]["ci_high"])
    assert "## Probability of improvement" in report.markdown and f"| {expected:.3f} |" in report.markdown


def test_last_k_scores_each_run_by_the_mean_of_its_last_k_evaluations(tmp_path):
    """--last 3: td3 ends above ddpg at the final evaluation but below it over the last three
    (its policy dipped before the end), so every statistic of the score turns around; a run with
    fewer evaluations than K is scored over what it has, and noted."""
    root = str(tmp_path / "sweep")
    curves = {"td3": [(0.0, 50.0, 10.0, 20.0, 100.0), (0.0, 60.0, 0.0, 30.0, 110.0), (0.0, 40.0, 20.0, 10.0, 90.0)],
              "ddpg": [(0.0, 70.0, 70.0, 70.0, 80.0), (0.0, 80.0, 60.0, 80.0, 70.0), (0.0, 60.0, 80.0, 60.0, 75.0)]}
    for agent, runs in curves.items():
        for seed, returns in enumerate(runs):
            make_run(os.path.join(root, f"{agent}{seed}"), agent, "hopper", seed, returns)
    final = aggregate([root], reps=200, out=str(tmp_path / "final"))
    smooth = aggregate([root], reps=200, out=str(tmp_path / "last3"), last=3)
    for report, k in ((final, 1), (smooth, 3)):
        rows = {r["agent"]: r for r in read_rows(os.path.join(report.out_dir, "results.csv"))}
        for agent, runs in curves.items():
            assert float(rows[agent]["mean"]) == pytest.approx(np.mean([np.mean(r[-k:]) for r in runs]))
            assert rows[agent]["score_evals"] == str(k)
        p = float(read_rows(os.path.join(report.out_dir, "improvement.csv"))[0]["p_x_above_y"])  # P(ddpg > td3)
        assert p == (0.0 if k == 1 else 1.0)
    assert "the mean `return_mean` of each run's last 3 evaluations" in smooth.markdown
    assert "last evaluation" in final.markdown and "last 3" not in final.markdown

    # a run with two evaluations, and a run evaluated twice as often: both noted
    make_run(os.path.join(root, "td3short"), "td3", "hopper", 3, (0.0, 40.0))
    make_run(os.path.join(root, "td3dense"), "td3", "hopper", 4, (0.0, 20.0, 40.0, 60.0, 80.0), eval_every=500)
    report = aggregate([root], reps=50, out=str(tmp_path / "short"), last=3)
    row = next(r for r in read_rows(os.path.join(report.out_dir, "results.csv")) if r["agent"] == "td3")
    scores = [np.mean(r[-3:]) for r in curves["td3"]] + [20.0, 60.0]
    assert float(row["mean"]) == pytest.approx(np.mean(scores))
    assert "1 run(s) have fewer than the 3 evaluations --last 3 averages" in report.markdown
    assert "seed=3 (" in report.markdown
    assert "the last 3 evaluations span different numbers of steps in different runs (1000: 2 run(s), 2000: 3 run(s))" \
        in report.markdown

    assert_usage_error(cli(root, "--last", 0), "--last 0", "at least 1")


def test_episodes_k_scores_each_run_by_the_mean_of_its_last_k_training_episodes(tmp_path):
    """--episodes 2: the score is the mean of train.csv's last two episode returns, not of any
    evaluation (the figure CleanRL publishes for PPO); a run with fewer episodes is noted, one
    without train.csv is an error naming it, and --episodes with --last is refused."""
    root = str(tmp_path / "sweep")
    episodes = {0: [5.0, 7.0, 9.0, 13.0], 1: [1.0, 3.0, 2.0], 2: [4.0]}
    for seed, returns in episodes.items():
        run = os.path.join(root, f"run{seed}")
        make_run(run, "td3", "hopper", seed, (0.0, 100.0 + seed))
        with open(os.path.join(run, "train.csv"), "w") as f:
            f.write("step,episode_return,episode_length\n")
            f.writelines(f"{10 * (i + 1)},{r},10\n" for i, r in enumerate(returns))
    report = aggregate([root], reps=50, out=str(tmp_path / "episodes"), episodes=2)
    row = read_rows(os.path.join(report.out_dir, "results.csv"))[0]
    assert float(row["mean"]) == pytest.approx(np.mean([(9 + 13) / 2, (3 + 2) / 2, 4.0]))
    assert row["score_episodes"] == "2" and row["score_evals"] == "0"
    assert "last 2 training episodes (`train.csv`'s `episode_return`, `--episodes 2`)" in report.markdown
    assert "1 run(s) have fewer than the 2 training episodes --episodes 2 averages" in report.markdown
    evaluated = aggregate([root], reps=50, out=str(tmp_path / "evals"))  # without it: the last evaluation
    assert float(read_rows(os.path.join(evaluated.out_dir, "results.csv"))[0]["mean"]) == pytest.approx(101.0)

    os.remove(os.path.join(root, "run1", "train.csv"))
    assert_usage_error(cli(root, "--episodes", 2), "run1", "train.csv")
    assert_usage_error(cli(root, "--episodes", 2, "--last", 3), "--episodes 2", "one of the two")


def test_aggregation_never_imports_tensorflow(tmp_path):
    """aggregate.py reads run dirs and computes statistics: TensorFlow's import (seconds, and GPU
    probing) has no place in it."""
    root = str(tmp_path / "sweep")
    make_sweep(root, agents=("td3",), envs=("hopper",), seeds=(0, 1))
    code = ("import sys, aggregate; assert aggregate.main([sys.argv[1], '--reps', '20']) == 0; "
            "assert 'tensorflow' not in sys.modules, 'aggregate.py imported TensorFlow'")
    proc = subprocess.run([sys.executable, "-c", code, root], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
