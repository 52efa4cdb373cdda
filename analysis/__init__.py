"""Aggregation of the runs of one or more seed sweeps (aggregate.py): tables, learning curves and
performance profiles, with the statistics of the rliable package (Agarwal et al. 2021, "Deep
Reinforcement Learning at the Edge of the Statistical Precipice"). It never imports TensorFlow.

    runs.py    finding run dirs, reading eval.csv / summary.json / .hydra, a run's --by values
    groups.py  grouping runs, and the notes on a group (incomplete, diverged, unequal, ...)
    stats.py   thin wrappers over rliable: IQM, the stratified bootstrap, profiles, P(X > Y)
    curves.py  IQM learning curves with their bands, solid and dashed
    tables.py  results.csv, improvement.csv, results.md
    plots.py   curves_<env>.png, performance_profile.png
    report.py  aggregate(): all of the above for the given paths

    python aggregate.py multirun/2026-11-21/12-00-00 [more sweep or run dirs] [--by buffer] [--out DIR]

Runs. Every directory holding `.hydra/config.yaml` under the given paths is a run (the search does
not descend into a run). A run's learning curve is the `return_mean` column of its `eval.csv`. Its
score, which every table, profile and probability below is of, is its final return (its last
evaluation), or with `--last K` the mean of its last K evaluations, so that a policy whose return
dips from one evaluation to the next (DQN's greedy policy often does) is not judged by one
evaluation; a run with fewer than K evaluations is scored over all it has, and noted. With
`--episodes K` the score is the mean return of its last K training episodes (`train.csv`), the
exploring policy's, which is what CleanRL publishes for PPO; the curves stay the evaluations'.
Runs are grouped by agent x env (the Hydra config group choices in `.hydra/hydra.yaml`) and by any
`--by` keys. A `--by` value comes, in this order, from
the config group choices (`buffer`, `network`, ...), the run's overrides (`agent.tau=0.01`), or the
saved config by dotted key (`agent.tau`); a run with none of these shows the key as unset, or as
the value `--by key=value` gives the runs that lack the key (runs from before the key existed,
or train.py's runs beside benchmarks/sb3_learning.py's: `--by implementation=tfrl`).

Statistics (all over runs, never over the episodes inside one evaluation; rliable's):
- IQM, the interquartile mean (rliable's `aggregate_iqm`): the mean of the middle 50% of the
  scores, i.e. `scipy.stats.trim_mean(x, 0.25)`: floor(n/4) scores are cut from each end, so for
  n < 4 it is the plain mean.
- Confidence intervals: 95% percentile intervals of the stratified bootstrap. Each replicate
  resamples the runs of every task (stratum) with replacement, independently per task, and
  recomputes the statistic; the interval is the 2.5th and 97.5th percentile of the replicates
  (rliable uses 50000 replicates; the default here is 10000, `--reps`, with which an endpoint moves
  by under 1% of the interval's width from one `--seed` to another, against up to 2% at 2000
  (`labs/bootstrap_noise/bootstrap_noise.py`); pass `--reps 50000` for numbers to publish). A row of the table is a
  single task, so its CI is the plain bootstrap over that group's runs. rliable's
  `get_interval_estimates` draws from numpy's global generator; each interval seeds it with
  (`--seed`, a hash of what it estimates) and puts it back after, so the output is reproducible
  and one group's interval does not change when other runs join the aggregation.
- Learning curves (one PNG per env): the IQM over runs of the eval return at each eval step, with
  the 95% bootstrap CI band (none for a single run); the runs are resampled at each step apart, as
  rliable does (a step's band is drawn from the same distribution as with whole runs resampled,
  the same runs at every step). The curve of a group is solid over the eval steps that all its runs
  have. When runs end at different steps (incomplete runs), it goes on dashed past the last
  evaluation every run reached, with a lighter band, over the runs that went on, as long as at
  least 2 of them remain: the IQM of fewer runs is a different estimate and may jump where a run
  drops out, so it is drawn apart.
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
without runs, a group whose runs use different agent classes or env ids under one name, a
`--by` key no run has, and a `--reps`, `--seed` or `--last` out of range.
"""
