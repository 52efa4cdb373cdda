"""Grouping runs (agent x env x --by values) and the notes a reader of a group's numbers needs:
incomplete, short or diverging runs, unequal lengths, runs that differ in more than the seed."""
from __future__ import annotations

from collections import Counter
from typing import Sequence

from analysis.runs import (MISSING, UNSET, AggregateError, ByKey, RunRecord, Score, by_value, config_value, format_value,
                           natural_key, short_path, value_order)

MIN_CI_RUNS = 5  # below this many runs per task, a percentile bootstrap CI is noted as too narrow
# Overrides that do not change what a run learns; a group whose runs differ only in these is not noted.
_NEUTRAL_OVERRIDES = ("seed", "progress", "log_every", "logger", "wandb", "checkpoint_every", "checkpoint_keep",
                      "save_buffer", "save_best", "resume", "hydra", "compile", "vectorization")


def provenance_notes(runs: list[RunRecord]) -> list[str]:
    """Where the runs pooled in a group were made by different code or library versions (their
    summary.json's `code` and `versions`), or some record none (written before runs recorded them)."""
    recorded = [r for r in runs if r.provenance]
    notes = []
    if recorded and len(recorded) < len(runs):
        notes.append(f"{len(runs) - len(recorded)} run(s) record no code or library versions (finished before runs "
                     f"recorded them), so they may differ from the others unseen: "
                     + ", ".join(r.label for r in runs if not r.provenance))
    fields = [("commit", lambda p: (p.get("code") or {}).get("commit")),
              ("a changed tree", lambda p: (p.get("code") or {}).get("dirty"))]
    fields += [(name, lambda p, name=name: (p.get("versions") or {}).get(name))
               for name in sorted({k for r in recorded for k in (r.provenance.get("versions") or {})})]
    for name, read in fields:
        values = Counter(str(read(r.provenance)) for r in recorded)
        if len(values) > 1:
            counts = ", ".join(f"{v}: {n} run(s)" for v, n in sorted(values.items()))
            notes.append(f"runs made by different code or libraries, {name} ({counts}): their difference may be that")
    return notes


def group_name(agent: str, env: str | None, by: Sequence[str], values: Sequence[str]) -> str:
    name = agent if env is None else f"{agent}/{env}"
    extra = ", ".join(f"{k}={v}" for k, v in zip(by, values))
    return f"{name} ({extra})" if extra else name


def group_key(run: RunRecord, by: Sequence[ByKey]) -> tuple:
    """(agent, env, *by values as text): the group a run belongs to."""
    return (run.agent, run.env, *[format_value(by_value(run, k)) for k in by])


def group_runs(runs: list[RunRecord], by: Sequence[ByKey]) -> dict[tuple, list[RunRecord]]:
    """{(agent, env, *by values): runs}, sorted; raises on an unknown --by key and on a group
    that mixes agent classes or env ids under one name."""
    for key in by:
        if all(config_value(r, key) is MISSING for r in runs):  # a default does not make a key exist
            groups = sorted({k for r in runs for k in r.choices if "/" not in k})
            raise AggregateError(
                f"--by {key}: no run has this key: it is not a config group choice in .hydra/hydra.yaml, "
                f"not in any run's overrides and not in .hydra/config.yaml. Config groups of these runs: "
                f"{', '.join(groups) or 'none'}; config keys are dotted paths such as agent.tau or batch_size.")
    groups: dict[tuple, list[RunRecord]] = {}
    for run in runs:
        groups.setdefault(group_key(run, by), []).append(run)
    for key, members in groups.items():
        members.sort(key=lambda r: (r.seed if r.seed is not None else -1, natural_key(r.path)))
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
    return dict(sorted(groups.items(), key=lambda kv: [value_order(str(x)) for x in kv[0]]))


def score_text(score: Score) -> str:
    """What a run's score is, for the report."""
    if score.episodes:
        return (f"Score = the mean return of each run's last {score.episodes} training episodes (`train.csv`'s "
                f"`episode_return`, `--episodes {score.episodes}`): the exploring policy's, as CleanRL reports PPO; "
                f"the curves are the evaluations'.")
    if score.last == 1:
        return "Score = final return = the `return_mean` of each run's last evaluation (`eval.csv`)."
    return (f"Score = the mean `return_mean` of each run's last {score.last} evaluations (`eval.csv`, "
            f"`--last {score.last}`), which smooths over a policy that dips from one evaluation to the next.")


def _neutral(key: str) -> bool:
    return any(key == k or key.startswith(k + ".") for k in _NEUTRAL_OVERRIDES)


def group_notes(runs: list[RunRecord], by: Sequence[ByKey], score: Score = Score()) -> list[str]:
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
                     f"scored at their {score.where}: "
                     + ", ".join(f"{r.label} at step {r.final_step}" for r in incomplete))
    ends = Counter(r.final_step for r in runs)
    if len(ends) > 1:
        parts = []
        for step in sorted(ends, reverse=True):
            short = [r.label for r in runs if r.final_step == step and not r.complete]
            n = ends[step]
            parts.append(f"{step} ({n} run{'s' if n > 1 else ''}" + (f", incomplete: {', '.join(short)})" if short else ")"))
        notes.append("runs end at steps " + ", ".join(parts) + f"; each run is scored at its own {score.where}")
    short_runs = [r for r in runs if score.count(r) < score.k]
    if short_runs:
        notes.append(f"{len(short_runs)} run(s) have fewer than the {score.k} {score.source} {score.option} averages, "
                     f"so their score is the mean of all they have: "
                     + ", ".join(f"{r.label} ({score.count(r)})" for r in short_runs))
    last = score.last
    spans = Counter(int(r.steps[-1] - r.steps[-min(last, len(r.steps))]) for r in runs)
    if not score.episodes and last > 1 and len(spans) > 1:
        notes.append(f"the last {last} evaluations span different numbers of steps in different runs "
                     f"({', '.join(f'{s}: {n} run(s)' for s, n in sorted(spans.items()))}), so the scores average "
                     f"over different stretches of training")
    keys = sorted({k for r in runs for k in r.overrides if not _neutral(k) and k not in by and k not in ("agent", "env")})
    for key in keys:
        spelled = Counter(format_value(config_value(r, key)) for r in runs)
        if len(spelled) > 1:
            counts = [f"{v}: {n} run(s)" for v, n in sorted(spelled.items(), key=lambda kv: value_order(kv[0]))]
            if len(counts) > 6:
                counts = counts[:5] + [f"... {len(counts) - 5} more values"]
            notes.append(f"runs differ in {key} ({', '.join(counts)}); split them with --by {key}")
    notes.extend(provenance_notes(runs))
    seeds = Counter(r.seed for r in runs)
    for seed, n in sorted(seeds.items(), key=lambda kv: str(kv[0])):
        if n > 1:
            notes.append(f"seed {seed} appears in {n} runs: " + ", ".join(short_path(r.path) for r in runs if r.seed == seed))
    for r in runs:
        notes.extend(f"{r.label}: {p}" for p in r.problems)
    for key in by:
        unset = [r.label for r in runs if config_value(r, key) is MISSING]
        if unset:
            shown = UNSET if key.default is MISSING else f"{key.default} (--by {key}={key.default})"
            notes.append(f"--by {key} is unset in {len(unset)} run(s), shown as {shown}: {', '.join(unset)}")
    return notes

