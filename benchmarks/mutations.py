"""Mutation testing of the algorithms' parts: each declared mutation breaks one part on purpose (an
exact source edit), and the fast tests named with it should then fail. A mutation the tests miss
is a part no test holds.

    uv run python benchmarks/mutations.py [--only F1 Q9 ...] [--output benchmarks/results/mutations.json]

The mutations are applied one at a time to a throwaway worktree of this checkout's HEAD (commit a
change first), never to the checkout itself. Each test set runs unmutated once first: a set that
fails there would catch every mutation, so the run stops. A mutation whose `old` text is not in
its file exactly once is stale (the code moved on): update its declaration. Writes the JSON after
each mutation, prints a table at the end; exits 1 if a mutation survives (but those marked
expected="survives", each with its reason), is stale, or its tests could not run (pytest exit > 1).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PYTEST = ["-m", "pytest", "-p", "no:cacheprovider", "-n", "0", "-q", "-x", "-m", "not slow"]


@dataclass(frozen=True)
class Mutation:
    name: str
    breaks: str  # what the edit breaks, in one line
    file: str
    old: str  # must occur exactly once in `file`
    new: str
    tests: tuple[str, ...]  # pytest arguments: files, node ids, -k
    expected: str = "caught"  # or "survives", with `why`
    why: str = ""


# few test sets, so that running each unmutated first stays cheap; -k leaves out the tests that
# train whole runs in subprocesses
BUFFERS = ("tests/test_frames.py", "tests/test_buffer.py", "tests/test_replay_prioritized.py",
           "tests/test_prioritized_features.py")
ATARI = ("tests/test_pixels.py", "-k", "atari and not dqn_on_pixels")
PIXELS = ("tests/test_pixels.py", "-k", "shift or frame_stack or mrqs_inputs")
DMC = ("tests/test_dmc.py", "-k", "not continuous_agents and not renumbered")
MRQ = ("tests/test_mrq.py", "-k", "not resume")
DQN = ("tests/test_dqn.py", "tests/test_dqn_features.py")
CONFIG = ("tests/test_config.py::test_mrq_replays_as_its_authors_lap_and_td7_resets_the_largest_priority",)
ADAM = ("tests/test_agents.py", "-k", "adam")
STATS = ("tests/test_aggregate.py", "-k", "not end_to_end and not bad_input")

F, U, P, RP = "buffers/frames.py", "buffers/uniform.py", "buffers/prioritized.py", "agents/replay.py"
ATR, DM, PX, AUG, MQ, DQ = "envs/atari.py", "envs/dmc.py", "envs/pixels.py", "agents/augment.py", "agents/mrq.py", "agents/dqn.py"
ST, BASE = "analysis/stats.py", "agents/base.py"
MUTATIONS = (
    Mutation("F1", "first-observation slots never given back", F, "self._free(rows[self.step[rows] == 0])", "pass", BUFFERS),
    Mutation("F2", "every row keeps a whole stack (each add starts episodes)", U,
             "starts = self._ended if len(self._ended) == n else np.ones(n, bool)", "starts = np.ones(n, bool)", BUFFERS),
    Mutation("F3", "a truncation does not start a new episode's frames", U, " | np.asarray(truncated, bool).reshape(n)", "",
             BUFFERS),
    Mutation("F4", "unsampled window (stack - 1) * stride", F, "return self.stack * max(", "return (self.stack - 1) * max(",
             BUFFERS),
    Mutation("F5", "padding frames from the newest frame of the first observation", F,
             "k - 1 + position[first[:, j], j]]", "k - 1]", BUFFERS),
    Mutation("F6", "next_obs position capped at stack", F, "self.step[rows] + 1, stride",
             "np.minimum(self.step[rows] + 1, self.stack), stride", BUFFERS),
    Mutation("F7", "prioritized add leaves the unsampled rows their priority", P,
             "self._stored += n\n        self._exclude_unsampled()", "self._stored += n", BUFFERS),
    Mutation("F8", "round-off guard of _rows_at off", P, "if skip:  # round-off", "if False:  # round-off", BUFFERS,
             "survives", "only a draw that float round-off lands on a priority-0 leaf takes it; no fast test forces one"),
    Mutation("N1", "n-step: a truncation counted as a termination", U,
             'terminated |= use & (d[row, c["terminated"]] > 0)', "terminated |= use & ended", BUFFERS),
    Mutation("N2", "n-step ignores the transitions available", U, "use = alive & (k <= available)", "use = alive", BUFFERS),
    Mutation("N5", "n-step: gamma applied for unused steps too", U, "scale = np.where(use, scale * self.gamma, scale)",
             "scale = scale * self.gamma", BUFFERS),
    Mutation("Q5", "a truncation at a run's last step cuts the run", U, " & (k < horizon - 1)", "", BUFFERS),
    Mutation("Q13", "mean |reward| over the capacity, not the rows held", U, "self._abs_reward_sum / max(len(self), 1)",
             "self._abs_reward_sum / self.capacity", BUFFERS),
    Mutation("Q23", "terminations added after keep_reward_stats not tracked", U,
             "self._terminated = self._terminated or bool(np.any(terminated))", "pass", BUFFERS),
    Mutation("Q36", "MR.Q's draws carry reward scale 1, not the buffer's", RP, "np.full(k, buffer.mean_abs_reward(),",
             "np.full(k, 1.0,", BUFFERS),
    Mutation("A1", "Atari rewards not clipped", ATR, "return float(np.sign(reward))", "return float(reward)", ATARI),
    Mutation("A2", "Atari: no no-op starts", ATR, "noop_max=int(noop_max)", "noop_max=0", ATARI),
    Mutation("A3", "Atari: sticky actions never reach the ALE", ATR, "repeat_action_probability=float(sticky_action_prob)",
             "repeat_action_probability=0.0", ATARI),
    Mutation("A4", "Atari: one emulator frame a step", ATR, "frame_skip=frame_skip,", "frame_skip=1,", ATARI),
    Mutation("A6", "Atari: a lost life does not end the episode", ATR, "if 0 < lives < self.lives:", "if False:", ATARI),
    Mutation("A5", "the eval env ignores env.eval_kwargs", "training/builder.py",
             'kwargs = {**cfg.env.kwargs, **cfg.env.get("eval_kwargs", {})}', "kwargs = dict(cfg.env.kwargs)", ATARI),
    Mutation("D1", "DMC: an action repeat goes on past the episode's end", DM, "if time_step.last():\n                break",
             "if time_step.last():\n                pass", DMC),
    Mutation("D2", "DMC: never terminated", DM, "terminated = bool(ended and time_step.discount == 0.0)", "terminated = False",
             DMC),
    Mutation("D3", "DMC: the quadruped seen from camera 0, not 2", DM, '{"quadruped": 2}', '{"quadruped": 0}', DMC,
             "survives", "only a render shows the camera; no fast test compares renders"),
    Mutation("D4", "DMC: no mj_step1 after a restore", DM, "mujoco.mj_step1(model, data)", "pass", DMC),
    Mutation("D6", "DMC: reset's seed ignored", DM, "self.env.task.random.seed(seed % 2**32)", "pass", DMC),
    Mutation("P1", "a reset pads the frame stack with zeros", PX, "deque([frame] * self.k,",
             "deque([np.zeros_like(frame)] * (self.k - 1) + [frame],", PIXELS),
    Mutation("P2", "frame stack newest first", PX, "list(self.frames), axis=-1", "list(self.frames)[::-1], axis=-1", PIXELS),
    Mutation("G1", "shift offsets from [0, 2 pad), not [0, 2 pad]", AUG, "2 * self.pad + 1,", "2 * self.pad,", PIXELS),
    Mutation("G2", "acting shifts the observations", "agents/compiled.py", "explore: bool) -> np.ndarray:\n",
             "explore: bool) -> np.ndarray:\n        if self.random_shift is not None:\n"
             "            obs = self.random_shift(tf.constant(obs)).numpy()\n", PIXELS),
    Mutation("G3", "MR.Q's runs.next_obs not mapped (unshifted)", RP, "next_obs=_over_steps(fn, batch.runs.next_obs)",
             "next_obs=batch.runs.next_obs", PIXELS),
    Mutation("G4", "MR.Q's runs.obs not mapped (unshifted)", RP, "obs=fn(batch.runs.obs),", "obs=batch.runs.obs,", PIXELS),
    Mutation("G5", "shift pads with zeros, not the edge", AUG, "tf.repeat(first, pad, axis=axis), images, tf.repeat(last,",
             "tf.repeat(first * 0, pad, axis=axis), images, tf.repeat(last * 0,", PIXELS),
    Mutation("G6", "obs and next_obs share their shift offsets", RP,
             "return batch._replace(obs=fn(batch.obs), next_obs=fn(batch.next_obs))",
             "both, c = fn(tf.concat([batch.obs, batch.next_obs], -1)), batch.obs.shape[-1]\n"
             "        return batch._replace(obs=both[..., :c], next_obs=both[..., c:])", PIXELS),
    Mutation("Q7", "MR.Q's done term weighed before any termination", MQ, "self.done_weight * terminates,",
             "self.done_weight,", MRQ),
    Mutation("Q9", "dynamics targets from the target encoder", MQ, "stop_gradient(next_embedding(self.encoder))",
             "stop_gradient(next_embedding(self.encoder_target))", MRQ),
    Mutation("Q9b", "dynamics targets from the trained copy, gradients stopped", MQ,
             "stop_gradient(next_embedding(self.encoder))", "stop_gradient(next_embedding(self.encoder_next))", MRQ),
    Mutation("Q11", "target copies one update late", MQ, "(self.updates - 1) % self.target_update_every",
             "self.updates % self.target_update_every", MRQ),
    Mutation("Q12", "LAP's td_error the mean of the heads' errors", MQ, '"td_error": tf.reduce_max(',
             '"td_error": tf.reduce_mean(', MRQ),
    Mutation("Q19", "the policy ascends value head 1 only", MQ, "-tf.reduce_mean(q) +", "-tf.reduce_mean(q[:, 0]) +", MRQ),
    Mutation("Q20", "no pre-activation penalty", MQ, " + self.pre_activ_weight * tf.reduce_mean(tf.square(pre))", "", MRQ),
    Mutation("Q21", "value gradient not clipped", MQ, "clipped, _ = tf.clip_by_global_norm(grads[:len(variables)], "
             "self.value_grad_clip)", "clipped = grads[:len(variables)]", MRQ),
    Mutation("Q22", "reward and done weights swapped", MQ, "self.reward_weight, self.done_weight * terminates,",
             "self.done_weight, self.reward_weight * terminates,", MRQ),
    Mutation("Q24", "discrete actions' noises not halved", MQ, "scale = 0.5 if self.discrete else 1.0", "scale = 1.0", MRQ),
    Mutation("Q27", "target policy's noise not clipped", MQ, "tf.clip_by_value(self._tf_rng.normal(shape) * self.target_noise, "
             "-self.noise_clip, self.noise_clip)", "self._tf_rng.normal(shape) * self.target_noise", MRQ),
    Mutation("Q33", "Gumbel-softmax at tau 1", MQ, "uniform, self.gumbel_tau)", "uniform, 1.0)", MRQ),
    Mutation("Q28", "MR.Q's replay resets its largest priority every 250", "conf/buffer/mrq.yaml", "max_reset_every: 0",
             "max_reset_every: 250", CONFIG),
    Mutation("N3", "dueling head without the mean subtracted", "networks/mlp.py",
             "v + a - keras.ops.mean(a, axis=-1, keepdims=True)", "v + a", DQN),
    Mutation("N4", "DQN's hard copies one update late", DQ, "self.updates % self.target_update_every == 0",
             "self.updates % self.target_update_every == 1", DQN),
    Mutation("N9", "DQN's gradient-norm clip off", DQ, "grads, _ = tf.clip_by_global_norm(grads, self.max_grad_norm)", "pass",
             DQN),
    Mutation("S1", "IQM cuts a quarter of the runs rounded up", ST, "cut = n // 4", "cut = (n + 3) // 4", STATS),
    Mutation("S2", "the score distribution counts scores equal to tau", ST, "reshape(-1, 1) > taus", "reshape(-1, 1) >= taus",
             STATS),
    Mutation("S3", "P(X > Y) counts a tie as a loss", ST, "+ 0.5 * np.sum(x[:, None] == y)", "", STATS),
    Mutation("O1", "Adam's one kernel with beta_1 and beta_2 swapped", BASE, "beta1=beta_1, beta2=beta_2",
             "beta1=beta_2, beta2=beta_1", ADAM),
    Mutation("O2", "every variable in ops (the one kernel never taken)", BASE,
             "if variable.shape.num_elements() >= self.ONE_KERNEL_FROM:", "if False:", ADAM),
    Mutation("O3", "Adam's epsilon before the bias correction (Keras' placement, not PyTorch's)", BASE,
             "epsilon = tf.cast(self.epsilon, dtype) * correction_2", "epsilon = tf.cast(self.epsilon, dtype)", ADAM),
)


def pytest(tree: str, tests: tuple[str, ...]) -> tuple[int, float, str]:
    """Exit code, seconds and the first failing test of one pytest run in `tree`."""
    start = time.time()
    # no .pyc files: a mutant and the original of the same size written within a second would share one
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    proc = subprocess.run([sys.executable, *PYTEST, *tests], cwd=tree, env=env, capture_output=True, text=True)
    failed = re.search(r"^(?:FAILED|ERROR) (\S+)", proc.stdout, re.M)
    return proc.returncode, time.time() - start, failed.group(1) if failed else proc.stdout.strip()[-300:]


def run(m: Mutation, tree: str) -> dict:
    path = os.path.join(tree, m.file)
    with open(path) as f:
        source = f.read()
    found = source.count(m.old)
    if found != 1:
        return {"result": "stale", "seconds": 0.0,
                "detail": "stale: old text not found" if not found else f"stale: old text found {found} times"}
    with open(path, "w") as f:
        f.write(source.replace(m.old, m.new))
    try:
        code, seconds, detail = pytest(tree, m.tests)
    finally:
        with open(path, "w") as f:
            f.write(source)
    # 1: tests failed; any other code (a collection error, no test selected) says nothing of the mutant
    result = {0: "survived", 1: "caught"}.get(code, f"error (pytest exit {code})")
    return {"result": result, "seconds": round(seconds, 1), "detail": detail}


def ok(m: Mutation, r: dict) -> bool:
    return r["result"] == "caught" or (r["result"] == "survived" and m.expected == "survives")


def table(chosen: list[Mutation], results: dict) -> None:
    print("| name | breaks | result | s | caught by (or why not) |\n|---|---|---|---|---|")
    for m in chosen:
        r = results[m.name]
        marked = {"survived": "survived, as expected", "caught": "caught (marked to survive: drop the mark)"}
        shown = marked.get(r["result"], r["result"]) if m.expected == "survives" else r["result"]
        why = m.why if r["result"] == "survived" else r["detail"].splitlines()[-1] if r["detail"] else ""
        print(f"| {m.name} | {m.breaks} | {shown if ok(m, r) else '**' + shown + '**'} | {r['seconds']:.0f} | {why} |")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", nargs="*", default=None, help="mutation names (default: all)")
    p.add_argument("--output", default=os.path.join(ROOT, "benchmarks", "results", "mutations.json"))
    a = p.parse_args()
    names = [m.name for m in MUTATIONS]
    if len(set(names)) != len(names) or (a.only and set(a.only) - set(names)):
        sys.exit(f"error: duplicate or unknown mutation names; the declared ones: {' '.join(names)}")
    chosen = [m for m in MUTATIONS if not a.only or m.name in a.only]
    os.makedirs(os.path.dirname(os.path.abspath(a.output)), exist_ok=True)
    start, results, baseline = time.time(), {}, {}
    with tempfile.TemporaryDirectory(prefix="mutations-") as tmp:
        tree = os.path.join(tmp, "tree")
        subprocess.run(["git", "-C", ROOT, "worktree", "add", "--detach", "--quiet", tree, "HEAD"], check=True)
        try:
            head = subprocess.run(["git", "-C", tree, "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
            for tests in dict.fromkeys(m.tests for m in chosen):
                code, seconds, detail = pytest(tree, tests)
                baseline[" ".join(tests)] = round(seconds, 1)
                print(f"unmutated: {' '.join(tests)}: exit {code}, {seconds:.0f} s", flush=True)
                if code != 0:
                    sys.exit(f"error: these tests do not pass unmutated at {head[:7]}, so they would catch any "
                             f"mutation; fix them first:\n  {' '.join(tests)}\n  {detail}")
            for m in chosen:
                results[m.name] = r = run(m, tree)
                print(f"{m.name}: {r['result']} ({r['seconds']:.0f} s) {r['detail'] if r['result'] != 'survived' else ''}",
                      flush=True)
                with open(a.output, "w") as f:  # after each mutation: a run stopped early keeps what it found
                    json.dump({"commit": head, "wall_seconds": round(time.time() - start, 1), "pytest": PYTEST,
                               "baseline_seconds": baseline, "complete": len(results) == len(chosen),
                               "mutations": [{**asdict(m), **results[m.name]} for m in chosen if m.name in results]},
                              f, indent=1)
        finally:
            subprocess.run(["git", "-C", ROOT, "worktree", "remove", "--force", tree])
    print(f"\n{len(chosen)} mutations of {head[:7]} in {(time.time() - start) / 60:.1f} min")
    table(chosen, results)
    bad = [m.name for m in chosen if not ok(m, results[m.name])]
    print(f"survived, stale or not run: {' '.join(bad)}" if bad else "every mutation caught (or expected to survive)")
    print(f"written: {a.output}")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
