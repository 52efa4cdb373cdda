"""Check that tfrl's MR.Q, as training runs it, carries its state from update to update as the
author's `Agent.train()` does: both start from the author's freshly built agent, are fed the same
stream of transitions one add at a time, and run N >= 500 updates each through their own machinery
(tfrl: `MRQ.update()` compiled in graph mode and its encoder block, in the author's schedule, on the
project's buffer as `agent=mrq` builds it: LAP's priorities, the mask, n-step returns; the author:
`train()` on its buffer), each carrying its own optimizers, targets, reward scales, encoder copies
and priorities. Only the randomness is shared: every index the author's buffer draws and every
noise draw of its target policy, fed to tfrl's draws in the same order.

    bash benchmarks/setup_sb3.sh && bash benchmarks/setup_author.sh mrq      # once
    uv run python benchmarks/author_mrq_chained_check.py --task walker        # DMC walker-walk from states
    uv run python benchmarks/author_mrq_chained_check.py --task hopper        # Hopper-v5: terminations
    uv run python benchmarks/author_mrq_chained_check.py --task hopper --plant copy_late   # must fail

The stream: uniform random actions on the project's env (`envs.factory`, DMC at the author's action
repeat of 2), written once and added on both sides; the author's first update comes when its buffer
holds `--learning-starts` rows, and tfrl's at the same add. Per update the table compares each
sample's LAP error max|Q - target| (tfrl's `td_error`), the mean Q and mean target, and the
priorities handed back; at a few updates (the first block, the second block at 251, the end) each
network's weights, as their change since the start, and the reward scales. Beside each, the
author's own chain run again with every drawn batch's rows in another order: the floor float32
rounding sets. Exits 1 where a tfrl difference exceeds `--tolerance` times that floor and 1e-4.

Two documented departures of tfrl (docs/algorithms.md, MR.Q) are adapted on tfrl's buffer here, so
that what is compared is the machinery: the author's n-step sum (each reward times its own not-done
flag, across its buffer's final-observation rows) and its reward scale (the mean over those rows
too). `--plant` breaks one carry on tfrl's side: `copy_late` (the targets copied one update late),
`stale_scale` (the reward scale never refreshed after the first copy), `no_swap` (the block does not
make the encoder target a copy of the encoder). Each must fail.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks.author_mrq_update_check import LAYERS, encoder_pairs  # noqa: E402
from benchmarks.update_check import (REFERENCE_PYTHON, keras_weights, layer_pairs, relative, set_state,  # noqa: E402
                                     torch_state)

TASKS = {"walker": ("DMC-v1", {"domain": "walker", "task": "walk", "pixels": False, "action_repeat": 2, "image_size": 84}),
         "cheetah": ("DMC-v1", {"domain": "cheetah", "task": "run", "pixels": False, "action_repeat": 2, "image_size": 84}),
         "hopper": ("Hopper-v5", {})}
MODULES = ("encoder", "encoder_target", "policy", "policy_target", "value", "value_target")
SNAPSHOT = ("encoder", "encoder_target", "value", "policy")  # the targets of value and policy are earlier snapshots
PLANTS = ("copy_late", "stale_scale", "no_swap")
ROUNDING = 1e-4
GAMMA, Q_HORIZON, BATCH = 0.99, 3, 256


def reported(updates: int) -> list[int]:
    return sorted({1, 2, 250, 251, 252, updates} & set(range(1, updates + 1)))


# --- the stream (tfrl's venv) ----------------------------------------------------------------------
def make_stream(task: str, steps: int, seed: int) -> dict[str, np.ndarray]:
    from envs.factory import make_env

    env_id, kwargs = TASKS[task]
    env = make_env(env_id, seed=seed, kwargs=kwargs)
    rng = np.random.default_rng(seed)
    low, high = env.action_space.low, env.action_space.high
    out = {k: [] for k in ("obs", "action", "reward", "next_obs", "terminated", "truncated")}
    obs, _ = env.reset(seed=seed)
    for _ in range(steps):
        action = rng.uniform(low, high).astype(np.float32)
        next_obs, reward, terminated, truncated, _ = env.step(action)
        for key, value in zip(out, (obs, action, reward, next_obs, terminated, truncated)):
            out[key].append(value)
        obs = env.reset()[0] if terminated or truncated else next_obs
    env.close()
    return {k: np.asarray(v, np.float32 if k not in ("terminated", "truncated") else bool) for k, v in out.items()}


# --- the author's side (SB3's venv) ------------------------------------------------------------------
def author_chain(stream: dict, updates: int, learning_starts: int, seed: int, replay: list | None, rng) -> dict:
    """The author's agent fed the stream, `train()` after every add, until `updates` updates: its
    draws recorded (or, with `replay`, the recorded draws handed out again with each batch's rows
    permuted by `rng`), per update its errors and priorities, at the reported updates its state."""
    import types

    import gymnasium as gym
    import torch

    from benchmarks.mrq_reference import author_agent, author_mrq

    MRQ, _ = author_mrq()
    torch.set_num_threads(1)
    dim = stream["action"].shape[1]
    spaces = types.SimpleNamespace(observation_space=gym.spaces.Box(-np.inf, np.inf, stream["obs"].shape[1:]),
                                   action_space=gym.spaces.Box(-1.0, 1.0, (dim,)))
    agent = author_agent(MRQ, spaces, seed, learning_starts)
    buf, out = agent.replay_buffer, {"draws": [], "noise": [], "td": [], "q": [], "target": [], "priority": [],
                                     "q_scale": [], "target_scale": []}
    start = torch_state(agent, MODULES, {})
    real_sample_ind, real_randn, real_train_rl = buf.sample_ind, torch.randn_like, agent.train_rl
    perms: list[np.ndarray] = []

    def sample_ind():
        if replay is None:
            out["draws"].append(real_sample_ind().copy())
        else:
            drawn = replay["draws"][len(out["draws"])]
            perms.append(rng.permutation(len(drawn)))
            buf.sampled_ind = drawn[perms[-1]]
            out["draws"].append(buf.sampled_ind)
        return buf.sampled_ind

    def randn_like(x, **kw):
        if replay is None:
            noise = real_randn(x, **kw)
            out["noise"].append(noise.numpy().copy())
            return noise
        noise = replay["noise"][len(out["noise"])][perms[-1]]
        out["noise"].append(noise)
        return torch.as_tensor(noise)

    def train_rl(*args):
        q, target = real_train_rl(*args)
        unorder = np.argsort(perms[-1]) if replay is not None else slice(None)  # the drawn order
        q_, target_ = q.detach().numpy()[unorder], target.detach().numpy()[unorder, 0]
        out["td"].append(np.abs(q_ - target_[:, None]).max(1))
        out["q"].append(q_.mean())
        out["target"].append(target_.mean())
        out["q_scale"].append(np.abs(q_).mean())  # the units the means are compared in (a mean may be near 0)
        out["target_scale"].append(np.abs(target_).mean())
        return q, target

    buf.sample_ind, agent.train_rl, torch.randn_like = sample_ind, train_rl, randn_like
    try:
        for t in range(len(stream["reward"])):
            buf.add(stream["obs"][t], stream["action"][t], stream["next_obs"][t], float(stream["reward"][t]),
                    bool(stream["terminated"][t]), bool(stream["truncated"][t]))
            before = agent.training_steps
            agent.train()
            if agent.training_steps == before:
                continue
            k = agent.training_steps
            if k == 1:
                out["first_add"] = np.int64(t)
            rows = buf.sampled_ind if replay is None else buf.sampled_ind[np.argsort(perms[-1])]
            out["priority"].append(buf.priority[rows].numpy().copy())
            if k in reported(updates):
                out.update({f"at{k}/{key}": v for key, v in torch_state(agent, SNAPSHOT, {}).items()})
                out[f"at{k}/scales"] = np.float32([agent.reward_scale, agent.target_reward_scale])
            if k == updates:
                break
    finally:
        torch.randn_like = real_randn
    out.update({f"start/{key}": v for key, v in start.items()})
    return out


def author_side(path: str, stream_path: str, updates: int, learning_starts: int, seed: int) -> None:
    stream = dict(np.load(stream_path))
    first = author_chain(stream, updates, learning_starts, seed, None, None)
    floor = author_chain(stream, updates, learning_starts, seed, first, np.random.default_rng(seed + 1))
    data = {}
    for prefix, chain in (("author", first), ("reordered", floor)):
        for key, value in chain.items():
            if key == "draws":
                data[f"{prefix}/draw_sizes"] = np.array([len(d) for d in value])
                data[f"{prefix}/draws"] = np.concatenate(value)
            else:
                data[f"{prefix}/{key}"] = np.stack(value) if isinstance(value, list) else value
    np.savez(path, **data)


# --- tfrl's side ---------------------------------------------------------------------------------------
def author_rows(ended: np.ndarray) -> np.ndarray:
    """tfrl's row of each of the author's rows, -1 for its final-observation rows (one after every
    episode's end)."""
    out = []
    for r, end in enumerate(ended):
        out.append(r)
        if end:
            out.append(-1)
    return np.asarray(out)


class AuthorConventions:
    """The two departures adapted on tfrl's buffer (the module docstring): the author's n-step sum
    and reward scale, computed from tfrl's own stored rows and the stream's episode ends."""

    def __init__(self, buffer, stream: dict):
        self.buffer, self.ended = buffer, stream["terminated"] | stream["truncated"]
        self.terminated, self.reward, self.next_obs = stream["terminated"], stream["reward"], stream["next_obs"]

    def n_step_return(self, idx: np.ndarray):
        """(reward * not_done * gammas).sum() over the author's Q_horizon rows from each start, its
        final-observation rows holding reward 0 and not-done 0; the discount gamma^n times their product."""
        reward, discount, last = np.zeros(len(idx)), np.ones(len(idx)), idx.copy()
        for i, r in enumerate(idx):
            final, scale = False, 1.0
            for _ in range(Q_HORIZON):
                if final:  # the author's final-observation row
                    discount[i], final = 0.0, False
                else:
                    not_done = 1.0 - float(self.terminated[r])
                    reward[i] += scale * self.reward[r] * not_done
                    discount[i] *= not_done
                    last[i], final, r = r, bool(self.ended[r]), r + 1
                scale *= GAMMA
        return (reward.astype(np.float32), self.next_obs[last].astype(np.float32),
                (discount * GAMMA ** Q_HORIZON).astype(np.float32))

    def mean_abs_reward(self, eps: float = 1e-8) -> float:
        n = len(self.buffer)  # the author's size: its rows and the final-observation rows before the newest add
        return max(float(np.abs(self.reward[:n]).sum(dtype=np.float64) / (n + self.ended[:n - 1].sum())), eps)


class GraphQueue:
    """The agent's tf.random.Generator replaced by the author's recorded normal draws, handed out in
    order from inside the compiled update (a host call per draw)."""

    def __init__(self, draws: list[np.ndarray]):
        self.draws = list(draws)

    def normal(self, shape):
        import tensorflow as tf

        out = tf.numpy_function(lambda: self.draws.pop(0), [], tf.float32, stateful=True)
        return tf.ensure_shape(out, [None, None])


def tfrl_chain(stream: dict, author: dict, updates: int, plant: str | None) -> dict:
    import tensorflow as tf

    from agents.compiled import CompiledAgent
    from agents.mrq import MRQ
    from networks.mrq import MRQNetworks
    from training.config import compose_config
    from training.parts import build_buffer

    import gymnasium as gym

    obs_dim, dim = stream["obs"].shape[1], stream["action"].shape[1]
    agent = MRQ((obs_dim,), MRQNetworks(), np.random.default_rng(0), action_low=-np.ones(dim), action_high=np.ones(dim))
    pairs = {"value": layer_pairs(agent.value, LAYERS["value"]), "policy": layer_pairs(agent.policy_net, LAYERS["policy"]),
             "value_target": layer_pairs(agent.value_target, LAYERS["value"]),
             "policy_target": layer_pairs(agent.policy_target, LAYERS["policy"]),
             "encoder": encoder_pairs(agent.encoder, False), "encoder_target": encoder_pairs(agent.encoder_target, False)}
    start = {k[len("author/start/"):]: v for k, v in author.items() if k.startswith("author/start/")}
    set_state(start, [(p, module, None) for module, p in pairs.items()])
    agent._tf_rng = GraphQueue(list(author["author/noise"]))
    if plant == "copy_late":
        agent.updates.assign(-1)  # the first copy at the second update, and every one after it one late
    if plant == "no_swap":
        agent.start_block = lambda: tf.constant(True)
    learner = CompiledAgent(agent, compile="graph")

    cfg = compose_config(["agent=mrq", "env=pendulum", f"buffer.capacity={len(stream['reward']) + 10}"])
    space = gym.spaces.Box(-np.inf, np.inf, (obs_dim,), np.float32)
    buffer = build_buffer(cfg, space, gym.spaces.Box(-1.0, 1.0, (dim,), np.float32), np.random.default_rng(0),
                          learner.replay.mask_horizon)
    conventions = AuthorConventions(buffer, stream)
    buffer._n_step_return, buffer.mean_abs_reward = conventions.n_step_return, conventions.mean_abs_reward
    if plant == "stale_scale":
        first = []
        buffer.mean_abs_reward = lambda eps=1e-8: (first or first.append(conventions.mean_abs_reward()) or first)[0]
    rows = author_rows(stream["terminated"] | stream["truncated"])
    draws = rows[author["author/draws"]]
    assert (draws >= 0).all(), "the author drew a final-observation row"
    queue = [draws]

    def rows_at(values):
        n = len(values)
        out, queue[0] = queue[0][:n], queue[0][n:]
        return out.copy()

    buffer._rows_at = rows_at
    out = {"td": [], "q": [], "target": [], "priority": []}
    first_add, done = int(author["author/first_add"]), 0
    for t in range(len(stream["reward"])):
        buffer.add(stream["obs"][t:t + 1], stream["action"][t:t + 1], stream["reward"][t:t + 1],
                   stream["next_obs"][t:t + 1], stream["terminated"][t:t + 1], stream["truncated"][t:t + 1])
        if t < first_add:
            continue
        if done % learner.block.every == 0:  # the loop's block_due, the runs drawn as training draws them
            for i, k in enumerate(learner.block_chunks(BATCH)):
                learner.run_block(learner.block.replay.draw(buffer, BATCH, k), start=i == 0)
        metrics = learner.update(learner.replay.draw(buffer, BATCH, 1))
        buffer.update_priorities(metrics["td_error"])
        done += 1
        out["td"].append(np.asarray(metrics["td_error"]))
        out["q"].append(float(metrics["q"]))
        out["target"].append(float(metrics["target_q"]))
        out["priority"].append(buffer._tree.get(buffer.last_indices))
        if done in reported(updates):
            out.update({f"at{done}/{key}": v for key, v in keras_weights([(pairs[m], m, None) for m in SNAPSHOT]).items()})
            out[f"at{done}/scales"] = np.float32([agent.reward_scale.numpy(), agent.target_reward_scale.numpy()])
        if done == updates:
            break
    return out


def compare(mine: dict, theirs: dict, start: dict, updates: int) -> tuple[list[dict], dict[int, dict]]:
    """Per update: the relative difference of the per-sample errors and of the priorities, and the
    difference of the mean Q and mean target in units of the author's mean |Q| and |target| on the
    batch; at the reported updates, of each network's change and of the scales."""
    def in_units(key, k):
        return abs(float(mine[key][k]) - float(theirs[key][k])) / max(float(theirs[f"{key}_scale"][k]), 1e-12)

    per_update = [{"LAP error": relative(mine["td"][k], theirs["td"][k]), "mean Q": in_units("q", k),
                   "mean target": in_units("target", k),
                   "priorities": relative(mine["priority"][k], theirs["priority"][k])} for k in range(updates)]
    at = {}
    for k in reported(updates):
        row = {}
        for module in SNAPSHOT:
            keys = sorted(key for key in start if key.startswith(module + "/"))
            row[f"{module} change"] = relative(
                np.concatenate([(mine[f"at{k}/{key}"] - start[key]).ravel() for key in keys]),
                np.concatenate([(theirs[f"at{k}/{key}"] - start[key]).ravel() for key in keys]))
        row["reward scales"] = relative(mine[f"at{k}/scales"], theirs[f"at{k}/scales"])
        at[k] = row
    return per_update, at


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", choices=sorted(TASKS), default="walker")
    parser.add_argument("--updates", type=int, default=500)
    parser.add_argument("--learning-starts", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tolerance", type=float, default=100.0, help="times the author's own floor (or 1e-4) that passes")
    parser.add_argument("--plant", choices=PLANTS, help="break one carry on tfrl's side: the check must fail")
    parser.add_argument("--author-data", metavar="NPZ", help="keep the author's side here, or read it from here if it exists")
    parser.add_argument("--author-side", nargs=2, metavar=("OUT", "STREAM"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.author_side:
        author_side(*args.author_side, args.updates, args.learning_starts, args.seed)
        return 0
    import subprocess

    from benchmarks.mrq_reference import REF

    if not (os.path.isfile(os.path.join(REF, "MRQ.py")) and os.path.exists(REFERENCE_PYTHON)):
        sys.exit("the author's MR.Q is not set up: run `bash benchmarks/setup_sb3.sh` and "
                 "`bash benchmarks/setup_author.sh mrq` once, then this again.")
    with tempfile.TemporaryDirectory() as tmp:
        out = args.author_data or os.path.join(tmp, "author.npz")
        stream_path = out + ".stream.npz"
        if not os.path.exists(out):
            # the author starts a few hundred adds early on short episodes: room for that and the updates
            np.savez(stream_path, **make_stream(args.task, args.learning_starts + args.updates + 50, args.seed))
            subprocess.run([REFERENCE_PYTHON, os.path.abspath(__file__), "--author-side", out, stream_path,
                            "--updates", str(args.updates), "--learning-starts", str(args.learning_starts),
                            "--seed", str(args.seed)], check=True)
        author, stream = dict(np.load(out)), dict(np.load(stream_path))
    theirs = {k[len("author/"):]: v for k, v in author.items() if k.startswith("author/")}
    floor_chain = {k[len("reordered/"):]: v for k, v in author.items() if k.startswith("reordered/")}
    start = {k[len("start/"):]: v for k, v in theirs.items() if k.startswith("start/")}
    n = min(args.updates, len(theirs["td"]))
    mine = tfrl_chain(stream, author, n, args.plant)
    ours, at_ours = compare(mine, theirs, start, n)
    floor, at_floor = compare(floor_chain, theirs, start, n)
    return report(args, n, ours, floor, at_ours, at_floor)


def report(args, n: int, ours: list[dict], floor: list[dict], at_ours: dict, at_floor: dict) -> int:
    print(f"{args.task}: {n} updates from the author's fresh agent (first at add {args.learning_starts}), "
          f"{'planted: ' + args.plant if args.plant else 'nothing planted'}; relative difference to the author's "
          f"chain: tfrl's | the author's own with each batch's rows reordered")
    worst = 0.0
    windows = [(a, b) for a, b in ((1, 1), (2, 2), (3, 250), (251, 251), (252, n)) if a <= min(b, n)]
    for key in ours[0]:
        cells = []
        for a, b in windows:
            mine = max(row[key] for row in ours[a - 1:min(b, n)])
            bound = max(row[key] for row in floor[a - 1:min(b, n)])
            worst = max(worst, mine / max(bound, ROUNDING))
            cells.append(f"{mine:8.1e} | {bound:7.1e}")
        print(f"  {key:14}" + "".join(f"  [{a}-{min(b, n)}] {c}" for (a, b), c in zip(windows, cells)))
    for k, row in at_ours.items():
        line = []
        for key, mine in row.items():
            bound = at_floor[k][key]
            worst = max(worst, mine / max(bound, ROUNDING))
            line.append(f"{key} {mine:.1e} | {bound:.1e}")
        print(f"  after update {k}: " + ", ".join(line))
    same = worst <= args.tolerance
    print(f"largest difference {worst:.1f} x the floor (or {ROUNDING:g}), tolerance {args.tolerance:g}: "
          f"{'the same' if same else 'NOT the same'}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
