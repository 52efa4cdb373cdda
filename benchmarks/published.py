"""tfrl's runs beside an author's published per-seed results: a table at every step both have, and
a figure of the curves over the published mean and its 95% bootstrap band (and the seeds' range).

    bash benchmarks/setup_author.sh mrq     # once: the author's code and results/ (benchmarks/.mrq-ref)
    uv run python benchmarks/published.py --task Dmc-walker-walk /work/studies/mrq_dmc/tfrl_mrq_walker_walk_s*
    uv run python benchmarks/published.py --task Dmc-walker-walk RUN_DIR ... --figure out.png

RUN_DIRs are run directories of train.py, finished or not (their `eval.csv`). The published file is
the MR.Q author's `results/<domain>_results.txt` at the pinned commit (`--results` for another file
in that layout: an `Env: <task>` line, a header, then one row per step, one column per seed). Its
steps are agent steps, as tfrl's `step`. A `.csv` file is read in DR.Q's layout (`results/drq.csv`,
which `setup_author.sh drq` copies: one row per env_name, seed and env_step, metric avg_return),
whose DMC steps count frames: `--frames-per-step 2` turns them into agent steps at the action repeat
of 2 (its Gym steps are agent steps).

    bash benchmarks/setup_author.sh drq
    uv run python benchmarks/published.py --results benchmarks/.drq-ref/drq.csv --task cheetah_run \\
        --frames-per-step 2 --every 10000 RUN_DIR ... The band is a percentile bootstrap of the seeds' mean
(10,000 resamples, seeded), the mean's uncertainty over ten seeds, not the seeds' spread.
"""
from __future__ import annotations

import argparse
import csv
import os
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, "benchmarks", ".mrq-ref")  # setup_author.sh mrq copies results/*.txt here


def read_published(path: str, task: str) -> dict[int, np.ndarray]:
    """{step: the seeds' returns} of `task` in an author's results file."""
    table, found = {}, False
    with open(path) as f:
        for line in f:
            if line.startswith("Env:"):
                if found:
                    break
                found = line.split(":", 1)[1].strip() == task
            elif found and line[:1].isdigit():
                step, *seeds = line.split()
                table[int(step)] = np.array([float(x) for x in seeds])
    if not table:
        sys.exit(f"error: no task {task!r} in {path}; its tasks are the `Env:` lines of that file.")
    return table


def read_published_csv(path: str, task: str, frames_per_step: int = 1) -> dict[int, np.ndarray]:
    """{agent step: the seeds' returns} of `task` (its env_name) in DR.Q's results CSV."""
    rows: dict[int, dict[int, float]] = {}
    tasks = set()
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            tasks.add(row["env_name"])
            if row["env_name"] == task and row["metric"] == "avg_return":
                rows.setdefault(int(float(row["env_step"])) // frames_per_step, {})[int(row["seed"])] = float(row["value"])
    if not rows:
        sys.exit(f"error: no task {task!r} in {path}; its tasks: {', '.join(sorted(tasks))}.")
    return {step: np.array([seeds[k] for k in sorted(seeds)]) for step, seeds in sorted(rows.items())}


def read_run(run_dir: str) -> dict[int, float]:
    """{step: mean evaluation return} of a run directory's eval.csv."""
    path = os.path.join(run_dir, "eval.csv")
    if not os.path.exists(path):
        sys.exit(f"error: {run_dir} has no eval.csv; pass run directories of train.py that have evaluated.")
    with open(path) as f:
        return {int(row["step"]): float(row["return_mean"]) for row in csv.DictReader(f)}


def mean_band(seeds: np.ndarray, resamples: int = 10_000, seed: int = 0) -> tuple[float, float, float]:
    """The seeds' mean and its 95% percentile-bootstrap interval."""
    rng = np.random.default_rng(seed)
    means = seeds[rng.integers(0, len(seeds), (resamples, len(seeds)))].mean(axis=1)
    return float(seeds.mean()), float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))


def table(published: dict[int, np.ndarray], runs: dict[str, dict[int, float]], every: int) -> str:
    names = list(runs)
    lines = ["| step | " + " | ".join(names) + " | published mean [95% CI] | published seeds (min-max) |",
             "|---|" + "---|" * len(names) + "---|---|"]
    for step in sorted(published):
        if step % every or not any(step in r for r in runs.values()):
            continue
        mean, low, high = mean_band(published[step])
        cells = [f"{runs[n][step]:.1f}" if step in runs[n] else "" for n in names]
        lines.append(f"| {step} | " + " | ".join(cells) + f" | {mean:.1f} [{low:.1f}, {high:.1f}] | "
                     f"{published[step].min():.1f}-{published[step].max():.1f} |")
    return "\n".join(lines)


def figure(path: str, task: str, published: dict[int, np.ndarray], runs: dict[str, dict[int, float]], source: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    last = max(max(r) for r in runs.values())
    steps = [s for s in sorted(published) if s <= last]
    bands = np.array([mean_band(published[s]) for s in steps])
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    ax.fill_between(steps, [published[s].min() for s in steps], [published[s].max() for s in steps], color="0.9",
                    label="published seeds' range")
    ax.fill_between(steps, bands[:, 1], bands[:, 2], color="0.7", label="published mean, 95% CI")
    ax.plot(steps, bands[:, 0], color="0.3", lw=1.5, label=f"published mean ({len(published[steps[0]])} seeds)")
    for name, run in runs.items():
        xs = sorted(run)
        ax.plot(xs, [run[s] for s in xs], lw=1.2, label=name)
    ax.set(xlabel="agent steps", ylabel="evaluation return", title=task)
    ax.legend(fontsize=7, loc="upper left")
    fig.text(0.01, 0.01, source, fontsize=6, color="0.4")
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    fig.savefig(path, dpi=120, metadata={"Software": None})
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("runs", nargs="+", metavar="RUN_DIR")
    p.add_argument("--task", required=True, help="the `Env:` name in the results file (Dmc-walker-walk, Hopper-v4)")
    p.add_argument("--results", help="default: benchmarks/.mrq-ref/<dmc|gym|atari>_results.txt by the task's name")
    p.add_argument("--every", type=int, default=5000, help="the table's step spacing")
    p.add_argument("--frames-per-step", type=int, default=1,
                   help="a .csv's env_step units per agent step (DR.Q's DMC rows: 2)")
    p.add_argument("--figure", metavar="PNG")
    a = p.parse_args(argv)
    domain = "dmc" if a.task.startswith("Dmc-") else "atari" if a.task.startswith("Atari-") else "gym"
    path = a.results or os.path.join(RESULTS, f"{domain}_results.txt")
    if not os.path.exists(path):
        sys.exit(f"error: {path} is missing; run `bash benchmarks/setup_author.sh mrq` (or drq: they copy the "
                 f"authors' results/).")
    published = (read_published_csv(path, a.task, a.frames_per_step) if path.endswith(".csv")
                 else read_published(path, a.task))
    runs = {os.path.basename(os.path.normpath(d)): read_run(d) for d in a.runs}
    print(table(published, runs, a.every))
    if a.figure:
        figure(a.figure, a.task, published, runs, f"uv run python benchmarks/published.py --task {a.task} ...; "
                                                   f"published: {os.path.basename(path)}")
        print(f"written: {a.figure}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
