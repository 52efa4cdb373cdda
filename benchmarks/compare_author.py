"""tfrl's TD7, MR.Q or DR.Q against its authors' own PyTorch code, side by side on this machine: whole-loop
env steps/s of `train.py agent=<agent>` and of the agent's reference runner (benchmarks/td7_reference.py:
the author's `TD7.Agent` in the author's loop; benchmarks/mrq_reference.py: the author's `MRQ.Agent`, or
DR.Q's authors' `DRQ.Agent`, in the author's loop), on the same env with the same run length and learning_starts. The two run
alternately, `--rounds` times each, so that a busy spell on a shared machine hits both; the table
gives the medians, the per-round values and the ratio of medians (tfrl / author).

    bash benchmarks/setup_sb3.sh    # once: the venv the authors' code runs in (benchmarks/.venv-sb3)
    bash benchmarks/setup_author.sh td7    # once: the author's TD7.py and buffer.py (benchmarks/.td7-ref)
    bash benchmarks/setup_author.sh mrq    # once: the author's MRQ.py and its modules (benchmarks/.mrq-ref)
    uv run python benchmarks/compare_author.py [--agent td7] [--env hopper] [--steps 8000] [--learning-starts 2000] [--rounds 3]
    uv run python benchmarks/compare_author.py --agent mrq --steps 1500 --learning-starts 1000 --rounds 3
    bash benchmarks/setup_author.sh drq && uv run python benchmarks/compare_author.py --agent drq --steps 1500 \
        --learning-starts 1000 --rounds 3

Each run gets its own temporary hydra.run.dir and reports summary.json's `steps_per_second`: env steps
over the wall time of the whole loop, evaluation included. To keep the evaluation from dominating,
both get eval_every=<steps> and eval_episodes=1 (one episode at step 0 and one at the end). Both are
single-threaded by default: tfrl `speed.threads.inter_op=1 speed.threads.intra_op=<threads>`, the
author `<agent>_author.threads=<threads>` (torch's intra-op threads).

TD7: both train in bursts at episode ends (TD7's policy checkpoints: the updates due since the last
episode end are done together when an episode ends), so the steps/s of a run includes all the
updates of the episodes finished by its end, and none for the steps of an episode still running
then. Both act at random until the first episode end past learning_starts and train first at the
end of the next episode, so the two do the same updates (the round lines and the JSON give each
run's count). MR.Q and DR.Q: both act at random and do not train for the first learning_starts steps, then
update once per env step. Writes labs/records/<agent>_comparison.json (or `--out`), one case
per env, keeping the cases of other envs that file already holds.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks.compare_sb3 import HERE, PYTHONS, ROOT, SETUP, write_report

# the copies of the authors' code that setup_author.sh makes, the runner of each and its thread setting
REFERENCES = {"td7": (".td7-ref", "td7_reference.py", "td7_author"),
              "mrq": (".mrq-ref", "mrq_reference.py", "mrq_author"),
              "drq": (".drq-ref", "mrq_reference.py", "mrq_author")}  # DR.Q's authors' code, MR.Q's loop


def run(cmd: list[str], overrides: list[str]) -> dict:
    """Run `cmd` with `overrides` in a fresh run dir; its summary.json."""
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = os.path.join(tmp, "run")  # not yet there: train.py refuses an existing run dir
        proc = subprocess.run([*cmd, *overrides, f"hydra.run.dir={run_dir}"], cwd=ROOT, capture_output=True, text=True)
        if proc.returncode != 0:
            sys.exit(f"error: `{' '.join(cmd + overrides)}` failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
        with open(os.path.join(run_dir, "summary.json")) as f:
            return json.load(f)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--agent", default="td7", choices=sorted(REFERENCES), help="whose author's code to run beside tfrl")
    p.add_argument("--env", default="hopper", help="conf/env/ group choice")
    p.add_argument("--steps", type=int, default=8000, help="env steps per run (total_steps)")
    p.add_argument("--learning-starts", type=int, default=2000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=1,
                   help="torch's intra-op threads for the author; TF's intra-op threads (inter-op 1) for tfrl")
    p.add_argument("--out", help="default: labs/records/<agent>_comparison.json")
    p.add_argument("--tfrl", nargs="*", default=[], metavar="OVERRIDE",
                   help="more overrides for tfrl's train.py (speed.update_precision=bfloat16)")
    a = p.parse_args()
    out = a.out or os.path.join(ROOT, "labs", "records", f"{a.agent}_comparison.json")
    ref_dir, runner, threads_key = REFERENCES[a.agent]
    ref = os.path.join(HERE, ref_dir)
    if not os.path.exists(PYTHONS["sb3"]):
        print(f"error: no SB3 environment at {PYTHONS['sb3']}; create it with `{SETUP['sb3']}`.", file=sys.stderr)
        sys.exit(2)
    if not os.path.isfile(os.path.join(ref, "COMMIT")):
        print(f"error: the author's {a.agent} is not in {ref}; copy it with `bash benchmarks/setup_author.sh {a.agent}`.",
              file=sys.stderr)
        sys.exit(2)

    common = [f"agent={a.agent}", f"env={a.env}", f"total_steps={a.steps}", f"learning_starts={a.learning_starts}",
              f"eval_every={a.steps}", "eval_episodes=1"]
    ours_args = common + ["speed.threads.inter_op=1", f"speed.threads.intra_op={a.threads}", *a.tfrl]
    author_args = common + [f"{threads_key}.threads={a.threads}"]
    ours_cmd = [sys.executable, os.path.join(ROOT, "train.py")]
    author_cmd = [PYTHONS["sb3"], os.path.join(HERE, runner)]
    ours, author, ours_updates, author_updates = [], [], [], []
    for r in range(a.rounds):
        s = run(ours_cmd, ours_args)
        ours.append(s["steps_per_second"])
        ours_updates.append(s.get("updates"))
        s = run(author_cmd, author_args)
        author.append(s["steps_per_second"])
        author_updates.append(s[f"{a.agent}_settings"]["updates"])
        print(f"{a.agent}_{a.env} round {r + 1}: tfrl {ours[-1]:.1f}  author {author[-1]:.1f} env steps/s "
              f"(updates: tfrl {ours_updates[-1]}, author {author_updates[-1]})", flush=True)

    name = f"{a.agent}_{a.env}"
    row = {"tfrl": ours, "author": author, "tfrl_median": statistics.median(ours),
           "author_median": statistics.median(author), "ratio": statistics.median(ours) / statistics.median(author),
           "tfrl_updates": ours_updates, "author_updates": author_updates,
           "tfrl_overrides": ours_args, "author_overrides": author_args}
    print("\n| case | tfrl env steps/s (median) | tfrl rounds | author env steps/s (median) | author rounds | tfrl / author |"
          "\n|---|---|---|---|---|---|")
    print(f"| {name} | {row['tfrl_median']:.1f} | {', '.join(f'{x:.1f}' for x in ours)} | {row['author_median']:.1f} | "
          f"{', '.join(f'{x:.1f}' for x in author)} | {row['ratio']:.2f}x |")
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    write_report(out, {name: row}, a)


if __name__ == "__main__":
    main()
