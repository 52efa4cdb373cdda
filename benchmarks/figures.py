"""The README's pictures, drawn from the records committed under labs/:

    uv run python benchmarks/figures.py          # writes docs/figures/*.png

- `throughput_vs_sb3.png`: env steps/s of this project's training loop against the PyTorch reference
  on the same machine (Stable-Baselines3, sb3-contrib's CrossQ, and the TD7 and MR.Q authors' code) and SBX's
  where measured, per case of `labs/records/sb3_comparison.json` (compare_sb3.py) and
  `labs/records/<agent>_comparison.json` (compare_author.py): whole processes alternating, medians,
  with the ratio on each pair of bars;
- `ga_generation.png`: one GA generation every way (`labs/records/ga_generation_cartpole_warm40.json`);
- `curves_<name>.png`: learning curves against SB3, redrawn from the `curves_<env>.csv` that
  aggregate.py wrote beside its own plot under `labs/<study>/` (`CURVE_FIGURES`): the
  same figure, without the runs.

Each figure states its command and data file under it. Deterministic: the same JSON gives the
same PNG (matplotlib's Agg backend, no timestamps in the metadata).
"""
from __future__ import annotations

import argparse
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)  # analysis/, for the learning curves
RESULTS = os.path.join(ROOT, "labs", "records")
LABS = os.path.join(ROOT, "labs")  # the learning studies, one folder each

# the cases shown, in order, with their labels: the reference settings of each algorithm
THROUGHPUT_CASES = {
    "td3_ant": "TD3, Ant-v5\n(256-256, batch 256)",
    "sac_ant": "SAC, Ant-v5\n(256-256, batch 256)",
    "crossq_ant": "CrossQ, Ant-v5\n(critics 1024-1024)",
    "crossq_ant_floor": "CrossQ, Ant-v5\n(both XLA, later)",
    "td7_hopper": "TD7, Hopper-v5\n(1 thread each)",
    "mrq_hopper": "MR.Q, Hopper-v5\n(1 thread each)",
    "dqn_cartpole_every1": "DQN, CartPole-v1\n(64-64, every step)",
    "dqn_cartpole_every4": "DQN, CartPole-v1\n(64-64, every 4th)",
}


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig, path: str) -> None:
    fig.savefig(path, dpi=110, metadata={"Software": None}, bbox_inches="tight")


def throughput_figure(data: dict, path: str) -> None:
    """tfrl, SB3 and (for the cases measured with `--sbx`) SBX side by side, tfrl's ratio to each
    over its bar."""
    plt = _pyplot()
    cases = [c for c in THROUGHPUT_CASES if c in data["cases"]]
    impls = [("tfrl", "tfrl (TensorFlow 2)", "#1f77b4"),
             ("sb3", "PyTorch: Stable-Baselines3, sb3-contrib's CrossQ, the TD7 and MR.Q authors' code", "#bbbbbb"),
             ("sbx", "SBX (JAX)", "#8c8c8c")]
    shown = [i for i in impls if any(f"{i[0]}_median" in data["cases"][c] for c in cases)]
    fig, ax = plt.subplots(figsize=(14.5, 4.4))
    width = 0.8 / len(shown)
    for i, case in enumerate(cases):
        r = data["cases"][case]
        ours = r["tfrl_median"]
        ratios = [f"{ours / r[f'{key}_median']:.2f}x {r.get('label', key.upper()) if key == 'sb3' else key.upper()}"
                  for key, _, _ in shown[1:] if f"{key}_median" in r]
        for j, (key, label, color) in enumerate(shown):
            if f"{key}_median" in r:
                ax.bar(i + (j - (len(shown) - 1) / 2) * width, r[f"{key}_median"], width, color=color,
                       label=label if i == 0 else None)
        ax.text(i - (len(shown) - 1) / 2 * width, ours, "\n".join(ratios), ha="center", va="bottom", fontsize=8.5,
                fontweight="bold")
    ax.set_xticks(range(len(cases)), [THROUGHPUT_CASES[c] for c in cases], fontsize=8)
    ax.set_yscale("log")
    ax.set_ylim(top=ax.get_ylim()[1] * 6)
    ax.set_ylabel("training env steps/s (log scale)")
    ax.set_title("Training loop throughput, same machine, same settings")
    ax.legend(loc="upper left", fontsize=9)
    ax.grid(axis="y", alpha=0.3, which="both")
    fig.text(0.01, -0.06, "2-core CPU, no GPU; medians of whole processes alternating.\n"
             "uv run python benchmarks/compare_sb3.py --sbx (labs/records/sb3_comparison.json); "
             "uv run python benchmarks/compare_author.py --agent td7|mrq (labs/records/<agent>_comparison.json);\nCrossQ's "
             "later run: uv run python benchmarks/compare_sb3.py --no-sb3 --sbx --only crossq_ant (labs/records/crossq_sbx_floor.json)",
             fontsize=7.5)
    _save(fig, path)
    plt.close(fig)


GA_WAYS = {
    "numpy_per_individual": "numpy, one\nat a time",
    "tf_per_individual": "TF, one\nat a time",
    "batched": "TF, all at once,\nvector env",
    "in_graph": "generation in\none TF call",
    "in_graph_xla": "generation in\none XLA call",
}


def ga_figure(data: dict, path: str) -> None:
    plt = _pyplot()
    ways = [w for w in GA_WAYS if w in data["ways"]]
    ms = [data["ways"][w]["generation_ms"] for w in ways]
    fig, ax = plt.subplots(figsize=(8.2, 3.6))
    colors = ["#bbbbbb", "#d62728", "#ff7f0e", "#2ca02c", "#1f77b4"][:len(ways)]
    ax.bar(range(len(ways)), ms, color=colors)
    for i, w in enumerate(ways):
        ax.text(i, ms[i], f"{ms[i]:.1f} ms\n{data['ways'][w]['speedup_vs_numpy_per_individual']:.2f}x", ha="center",
                va="bottom", fontsize=8.5)
    ax.set_xticks(range(len(ways)), [GA_WAYS[w] for w in ways], fontsize=8.5)
    ax.set_yscale("log")
    ax.set_ylabel("ms per generation (log scale)")
    ax.set_ylim(top=max(ms) * 8)
    ax.set_title(f"A GA generation on {data['env']}: {data['population']} individuals, "
                 f"mean episode {data['mean_episode_length']:.0f} steps")
    fig.text(0.01, -0.06, f"2-core CPU; medians of {data['rounds']} alternating rounds. {data['command'].strip()}",
             fontsize=7.5)
    _save(fig, path)
    plt.close(fig)


# README curve figures: name -> the curves CSV aggregate.py wrote (relative to labs/)
CURVE_FIGURES = {
    "curves_td3_halfcheetah.png": "td3_tfrl_vs_sb3/halfcheetah_rerun/curves_halfcheetah.csv",
    "curves_sac_halfcheetah.png": "sac_tfrl_vs_sb3/curves_halfcheetah.csv",
    "curves_crossq_halfcheetah.png": "crossq_tfrl_vs_sb3/curves_halfcheetah.csv",
    "curves_td7_hopper.png": "td7_vs_author_and_td3/curves_hopper.csv",
    "curves_dqn_minatar_breakout.png": "minatar_dqn/curves_minatar-breakout.csv",
    "curves_dqn_atari_breakout.png": "atari_dqn/curves_atari-Breakout.csv",
}


# a later measurement against SBX that supersedes the SBX bar of a case: case -> (its file, the case there)
LATER_SBX = {"crossq_ant": ("crossq_sbx_floor.json", "crossq_ant")}


def with_authors(data: dict) -> dict:
    """sb3_comparison.json's cases and compare_author.py's, the author's code in the PyTorch column; a case
    measured against SBX again later (LATER_SBX) shows that run beside it (`<case>_floor`) instead of its own SBX bar."""
    cases = dict(data["cases"])
    for case, (source, name) in LATER_SBX.items():
        with open(os.path.join(RESULTS, source)) as f:
            later = json.load(f)["cases"][name]
        cases[case] = {k: v for k, v in cases[case].items() if not k.startswith("sbx")}
        cases[f"{case}_floor"] = {"tfrl_median": later["tfrl_median"], "sbx_median": later["sbx_median"]}
    for agent in ("td7", "mrq"):
        path = os.path.join(RESULTS, f"{agent}_comparison.json")
        if os.path.exists(path):
            with open(path) as f:
                for name, r in json.load(f)["cases"].items():
                    cases[name] = {"tfrl_median": r["tfrl_median"], "sb3_median": r["author_median"], "label": "author"}
    return {**data, "cases": cases}


def curve_figure(csv_path: str, path: str) -> None:
    import csv

    from analysis.curves import curves_from_rows
    from analysis.plots import plot_curves

    with open(csv_path, newline="") as f:
        plot_curves(path, *curves_from_rows(list(csv.DictReader(f))))


def main(argv=None) -> list[str]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=os.path.join(ROOT, "docs", "figures"))
    args = p.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    written = []
    for name, source, draw in (
        ("throughput_vs_sb3.png", "sb3_comparison.json", lambda data, path: throughput_figure(with_authors(data), path)),
        ("ga_generation.png", "ga_generation_cartpole_warm40.json", ga_figure),
    ):
        with open(os.path.join(RESULTS, source)) as f:
            data = json.load(f)
        path = os.path.join(args.out, name)
        draw(data, path)
        written.append(path)
        print(f"wrote {os.path.relpath(path, ROOT)}")
    for name, source in CURVE_FIGURES.items():
        source = os.path.join(LABS, source)
        if not os.path.exists(source):
            print(f"skipped {name}: no {os.path.relpath(source, ROOT)}")
            continue
        path = os.path.join(args.out, name)
        curve_figure(source, path)
        written.append(path)
        print(f"wrote {os.path.relpath(path, ROOT)}")
    return written


if __name__ == "__main__":
    main()
