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
    uv run python benchmarks/author_mrq_chained_check.py --task breakout --batch-size 64   # the CNN, Gumbel draws

The stream: uniform random actions on the project's env as `agent=mrq` composes it (DMC at the author's
action repeat of 2, Atari with the author's protocol and 4 frames stacked), written once and added on
both sides; on Atari the target policy's and the policy's Gumbel draws are fed too, and the random
shift is off on both sides (`author_shift_check.py` checks it on the same offsets); the author's first update comes when its buffer
holds `--learning-starts` rows, and tfrl's at the same add. Per update the table compares each
sample's LAP error max|Q - target| (tfrl's `td_error`), the mean Q and mean target, and the
priorities handed back; at a few updates (the first block, the second block at 251, the end) each
network's weights, as their change since the start, and the reward scales. Beside each, the
author's own chain run again with every drawn batch's rows in another order: the floor float32
rounding sets. Exits 1 where a tfrl difference exceeds `--tolerance` times that floor and 1e-4.

Two documented departures of tfrl (docs/algorithms.md, MR.Q) are adapted on tfrl's buffer here, so
that what is compared is the machinery: the author's n-step sum (each reward times its own not-done
flag, across its buffer's final-observation rows) and its reward scale (the mean over those rows
too). One bug of the author's buffer is mended on its side, as tfrl does it (found by this check):
its runs take, as the next state of a termination that is not a run's last step, the state index of
the final-observation row, which its buffer never writes (row 0's observation, until the ring wraps). `--plant` breaks one carry on tfrl's side: `copy_late` (the targets copied one update late),
`stale_scale` (the reward scale never refreshed after the first copy), `no_swap` (the block does not
make the encoder target a copy of the encoder). Each must fail.

`--author drq` runs DR.Q's authors' code (dmksjfl/DR.Q's `DRQ.Agent.train(writer)`, its faded buffer)
against tfrl's MR.Q as `agent=drq` builds it (conf/agent/drq.yaml, the faded replay included). DR.Q's
n-step return is the usual one and it never uses its reward scale, so neither convention is adapted:
tfrl's own buffer's returns are compared. Per update the table adds each row's chance of being drawn
next (priority x mask, x the fade's max(0.9999^age, 0.1) for DR.Q), over every row either buffer
holds. Its plants: `no_fade` (tfrl's buffer without the fade) and `no_infonce` (the encoder without
DR.Q's InfoNCE term) besides `copy_late` and `no_swap`.

    bash benchmarks/setup_author.sh drq
    uv run python benchmarks/author_mrq_chained_check.py --author drq --task hopper
    uv run python benchmarks/author_mrq_chained_check.py --author drq --task hopper --plant no_fade   # must fail
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
from dataclasses import dataclass, replace

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks.author_mrq_update_check import LAYERS, encoder_pairs  # noqa: E402
from benchmarks.update_check import REFERENCE_PYTHON, layer_pairs, relative, set_state, torch_state  # noqa: E402

# each task's env as `agent=mrq` composes it (its preset included)
TASKS = {"walker": ["env=dmc", "env.domain=walker", "env.task=walk"], "cheetah": ["env=dmc", "env.domain=cheetah", "env.task=run"],
         "hopper": ["env=hopper"], "breakout": ["env=atari", "env.game=Breakout"]}
HISTORY = 4  # the frames of an Atari observation
MODULES = ("encoder", "encoder_target", "policy", "policy_target", "value", "value_target")
# what each network computes on a fixed probe (the stream's first batch): compared as its change since the start
OUTPUTS = ("zs", "zsa", "model", "Q", "policy", "target zs")
PLANTS = {"mrq": ("copy_late", "stale_scale", "no_swap"), "drq": ("copy_late", "no_swap", "no_fade", "no_infonce")}
ROUNDING = 1e-4
GAMMA, Q_HORIZON = 0.99, 3


@dataclass(frozen=True)
class Chain:
    """What both sides run: `updates` updates from the add that holds `learning_starts` rows on,
    batches of `batch` and a target copy every `every` updates (the author's 256 and 250)."""

    updates: int = 500
    learning_starts: int = 1000
    seed: int = 0
    batch: int = 256
    every: int = 250
    author: str = "mrq"  # or "drq": DR.Q's authors' code against agent=drq

    def reported(self) -> list[int]:
        """The updates whose state is compared: the first two, each side of the second copy, the last."""
        e = self.every
        return sorted({1, 2, e, e + 1, e + 2, self.updates} & set(range(1, self.updates + 1)))

    def windows(self) -> list[tuple[int, int]]:
        e, n = self.every, self.updates
        return [(a, min(b, n)) for a, b in ((1, 1), (2, 2), (3, e), (e + 1, e + 1), (e + 2, n)) if a <= min(b, n)]


# --- the stream (tfrl's venv) ----------------------------------------------------------------------
def task_config(task: str, capacity: int = 1_000_000, agent: str = "mrq", every: int = 250, more: tuple = ()):
    from training.config import compose_config

    return compose_config([f"agent={agent}", *TASKS[task], f"buffer.capacity={capacity}",
                           f"agent.target_update_every={every}", *more])


def make_stream(task: str, steps: int, seed: int) -> dict[str, np.ndarray]:
    """Uniform random actions on the task's env as train.py makes it (frames stacked on Atari)."""
    import gymnasium as gym

    from envs.factory import make_env
    from training.config import frame_stack

    cfg = task_config(task)
    env = make_env(cfg.env.id, seed=seed, max_episode_steps=cfg.env.max_episode_steps, kwargs=cfg.env.kwargs,
                   frame_stack=frame_stack(cfg))
    rng = np.random.default_rng(seed)
    discrete = isinstance(env.action_space, gym.spaces.Discrete)
    out = {k: [] for k in ("obs", "action", "reward", "next_obs", "terminated", "truncated")}
    obs, _ = env.reset(seed=seed)
    for _ in range(steps):
        action = rng.integers(env.action_space.n) if discrete else rng.uniform(env.action_space.low, env.action_space.high)
        next_obs, reward, terminated, truncated, _ = env.step(action)
        for key, value in zip(out, (obs, action, reward, next_obs, terminated, truncated)):
            out[key].append(value)
        obs = env.reset()[0] if terminated or truncated else next_obs
    env.close()
    dtypes = {"action": np.int64 if discrete else np.float32, "reward": np.float32, "terminated": bool, "truncated": bool}
    return {k: np.asarray(v, dtypes.get(k)) for k, v in out.items()} | {
        "num_actions": np.int64(env.action_space.n if discrete else 0)}


# --- the author's side (SB3's venv) ------------------------------------------------------------------
def author_chain(stream: dict, chain: Chain, replay: dict | None, rng) -> dict:
    """The author's agent fed the stream, `train()` after every add, until `updates` updates: its
    draws recorded (or, with `replay`, the recorded draws handed out again with each batch's rows
    permuted by `rng`), per update its errors and priorities, at the reported updates its state."""
    import types

    import gymnasium as gym
    import torch

    from benchmarks.mrq_reference import NoWriter, author_agent, author_mrq

    MRQ, _ = author_mrq(chain.author)
    torch.set_num_threads(1)
    n, pixels = int(stream.get("num_actions", 0)), stream["obs"].ndim == 4
    states = (lambda x: np.moveaxis(x, -1, 0)) if pixels else (lambda x: x)  # the author's frames are (C, H, W)
    action_space = gym.spaces.Discrete(n) if n else gym.spaces.Box(-1.0, 1.0, stream["action"].shape[1:])
    spaces = types.SimpleNamespace(observation_space=gym.spaces.Box(0, 255, states(stream["obs"][0]).shape, np.uint8)
                                   if pixels else gym.spaces.Box(-np.inf, np.inf, stream["obs"].shape[1:]),
                                   action_space=action_space)
    agent = author_agent(MRQ, spaces, chain.seed, chain.learning_starts, history=HISTORY if pixels else 1)
    agent.batch_size = agent.replay_buffer.batch_size = chain.batch
    agent.target_update_freq = chain.every
    agent.pixel_augs = False  # the random shift is checked on the same offsets by author_shift_check.py
    buf, out = agent.replay_buffer, {"draws": [], "noise": [], "td": [], "q": [], "target": [], "priority": [],
                                     "q_scale": [], "target_scale": [], "exponential": [], "chance": []}
    train = (lambda: agent.train(NoWriter())) if chain.author == "drq" else agent.train
    start = torch_state(agent, MODULES, {})
    probe_obs = torch.as_tensor(np.stack([states(o) for o in stream["obs"][:chain.batch]])).float()
    probe_action = (torch.nn.functional.one_hot(torch.as_tensor(stream["action"][:chain.batch]), n).float() if n
                    else torch.as_tensor(stream["action"][:chain.batch]))

    def outputs() -> dict[str, np.ndarray]:
        with torch.no_grad():
            zs = agent.encoder.zs(probe_obs)
            zsa = agent.encoder(zs, probe_action)
            done, next_zs, reward = agent.encoder.model_all(zs, probe_action)
            # the policy's pre-activation from its MLP: `agent.policy(zs)` would draw a Gumbel sample on Atari,
            # one the chain's recorded draws must not hold
            values = (zs, zsa, torch.cat([done, next_zs, reward], 1), agent.value(zsa), agent.policy.policy(zs),
                      agent.encoder_target.zs(probe_obs))
        return {key: v.numpy().copy() for key, v in zip(OUTPUTS, values)}

    out.update({f"at0/{key}": v for key, v in outputs().items()})
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

    real_exponential = torch.Tensor.exponential_

    def exponential_(x, *args, **kw):  # the Gumbel-softmax's draws: the target policy's, then the policy's
        if replay is None:
            real_exponential(x, *args, **kw)
            out["exponential"].append(x.numpy().copy())
            return x
        drawn = replay["exponential"][len(out["exponential"])][perms[-1]]
        out["exponential"].append(drawn)
        return x.copy_(torch.as_tensor(drawn))

    buf.sample_ind, agent.train_rl, torch.randn_like = sample_ind, train_rl, randn_like
    torch.Tensor.exponential_ = exponential_
    try:
        for t in range(len(stream["reward"])):
            action = int(stream["action"][t]) if n else stream["action"][t]  # the author one-hot encodes ints
            buf.add(states(stream["obs"][t]), action, states(stream["next_obs"][t]), float(stream["reward"][t]),
                    bool(stream["terminated"][t]), bool(stream["truncated"][t]))
            if stream["terminated"][t] or stream["truncated"][t]:
                # the author's buffer never writes the state of its final-observation row, which its runs
                # read as the next state of a termination before a run's last step: the final state, as meant
                final = (buf.ind - 1) % buf.max_size
                buf.state_ind[final] = buf.next_ind[(final - 1) % buf.max_size]
            before = agent.training_steps
            train()
            if agent.training_steps == before:
                continue
            k = agent.training_steps
            if k == 1:
                out["first_add"] = np.int64(t)
            rows = buf.sampled_ind if replay is None else buf.sampled_ind[np.argsort(perms[-1])]
            out["priority"].append(buf.priority[rows].numpy().copy())
            out["chance"].append(author_chances(buf))
            if k in chain.reported():
                out.update({f"at{k}/{key}": v for key, v in outputs().items()})
                if chain.author == "mrq":  # DR.Q's authors keep the scale but never use it
                    out[f"at{k}/scales"] = np.float32([agent.reward_scale, agent.target_reward_scale])
            if k == chain.updates:
                break
    finally:
        torch.randn_like, torch.Tensor.exponential_ = real_randn, real_exponential
    out.update({f"start/{key}": v for key, v in start.items()})
    return out


def author_chances(buf) -> np.ndarray:
    """Each of the author's rows' chance of being drawn next: priority x mask (x DR.Q's fade, its
    `sample_ind`), where the mask hides a row its unwritten priority counts for nothing."""
    import torch

    n = buf.size
    mass = torch.where(buf.mask[:n] > 0, buf.priority[:n] * buf.mask[:n], 0.0)
    if hasattr(buf, "forget_weight"):
        mass = mass * buf.forget_weight[:n].clamp(0.1, 1)
    return (mass / mass.sum()).numpy().astype(np.float64)


def author_side(path: str, stream_path: str, chain: Chain) -> None:
    stream = dict(np.load(stream_path))
    first = author_chain(stream, chain, None, None)
    floor = author_chain(stream, chain, first, np.random.default_rng(chain.seed + 1))
    data = {}
    for prefix, chain in (("author", first), ("reordered", floor)):
        for key, value in chain.items():
            if key in ("draws", "chance"):  # ragged: concatenated, with their sizes
                data[f"{prefix}/{key}_sizes"] = np.array([len(d) for d in value])
                data[f"{prefix}/{key}"] = np.concatenate(value)
            elif not isinstance(value, list):
                data[f"{prefix}/{key}"] = value
            elif value:  # the Gumbel draws: discrete actions only
                data[f"{prefix}/{key}"] = np.stack(value)
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
    """The departures adapted on tfrl's buffer (the module docstring): MR.Q's author's n-step sum
    and reward scale, computed from tfrl's own stored rows and the stream's episode ends; for DR.Q,
    the encoder's runs past a termination."""

    def __init__(self, buffer, stream: dict):
        self.buffer, self.ended = buffer, stream["terminated"] | stream["truncated"]
        self.terminated, self.reward, self.next_obs = stream["terminated"], stream["reward"], stream["next_obs"]
        self.obs, self.action, self.rows = stream.get("obs"), stream.get("action"), author_rows(self.ended)

    def n_step_return(self, idx: np.ndarray):
        """(reward * not_done * gammas).sum() over the author's Q_horizon rows from each start, its
        final-observation rows and those not yet written holding reward 0 and not-done 0; the discount
        gamma^n times their product."""
        reward, discount, last = np.zeros(len(idx)), np.ones(len(idx)), idx.copy()
        for i, r in enumerate(idx):
            final, scale = False, 1.0
            for _ in range(Q_HORIZON):
                if final or r >= len(self.buffer):  # the author's final-observation row, or one not yet written
                    discount[i], final = 0.0, False
                else:
                    not_done = 1.0 - float(self.terminated[r])
                    reward[i] += scale * self.reward[r] * not_done
                    discount[i] *= not_done
                    last[i], final, r = r, bool(self.ended[r]), r + 1
                scale *= GAMMA
        return (reward.astype(np.float32), self.next_obs[last], (discount * GAMMA ** Q_HORIZON).astype(np.float32))

    def runs(self, idx: np.ndarray, horizon: int):
        """The encoder's runs as the author's buffer holds them (DR.Q: its InfoNCE term, masked by the
        batch's share of live samples rather than per sample, sees a run's steps after a termination,
        which MR.Q's losses never do): after a terminal transition comes the author's final-observation
        row (the final state, a zero action, reward 0, terminated, and as its next state row 0's, which
        its buffer never writes), then the next episode. tfrl's runs go on into the next episode."""
        from buffers.types import Sequences

        rows = self.rows
        where = np.flatnonzero(rows >= 0)  # tfrl row j is the author's row where[j]

        def state(r):  # the author's state of row r (the final row's as the chain mends it)
            return self.obs[rows[r]] if rows[r] >= 0 else self.next_obs[rows[r - 1]]

        out = {k: [] for k in ("action", "reward", "next_obs", "terminated")}
        for start in where[idx]:
            for k in range(horizon):
                r, last = start + k, k == horizon - 1
                j = rows[r]
                out["action"].append(self.action[j] if j >= 0 else np.zeros_like(self.action[0]))
                out["reward"].append(self.reward[j] if j >= 0 else 0.0)
                out["terminated"].append(float(self.terminated[j]) if j >= 0 else 1.0)
                out["next_obs"].append((self.next_obs[j] if j >= 0 else self.obs[0]) if last else state(r + 1))
        b = len(idx)
        return Sequences(self.obs[idx], np.float32(out["action"]).reshape(b, horizon, -1),
                         np.float32(out["reward"]).reshape(b, horizon),
                         np.float32(out["next_obs"]).reshape(b, horizon, *self.obs.shape[1:]),
                         np.float32(out["terminated"]).reshape(b, horizon))

    def mean_abs_reward(self, eps: float = 1e-8) -> float:
        n = len(self.buffer)  # the author's size: its rows and the final-observation rows before the newest add
        return max(float(np.abs(self.reward[:n]).sum(dtype=np.float64) / (n + self.ended[:n - 1].sum())), eps)


class GraphQueue:
    """The agent's tf.random.Generator replaced by the author's recorded normal draws, handed out in
    order from inside the compiled update (a host call per draw)."""

    def __init__(self, draws: list[np.ndarray], exponentials: list[np.ndarray]):
        # the author's exponential draws e of the Gumbel-softmax as the uniforms u = exp(-e) tfrl's takes
        self.draws, self.uniforms = list(draws), [np.exp(-e.astype(np.float64)).astype(np.float32) for e in exponentials]

    @staticmethod
    def _pop(queue):
        import tensorflow as tf

        return tf.ensure_shape(tf.numpy_function(lambda: queue.pop(0), [], tf.float32, stateful=True), [None, None])

    def normal(self, shape):
        return self._pop(self.draws)

    def uniform(self, shape, minval=0.0, maxval=1.0):
        return self._pop(self.uniforms)


def tfrl_chain(task: str, stream: dict, author: dict, chain: Chain, plant: str | None) -> dict:
    import tensorflow as tf

    import gymnasium as gym

    from agents.compiled import CompiledAgent
    from training.builder import build_agent
    from training.parts import build_buffer

    n, pixels, shape = int(stream.get("num_actions", 0)), stream["obs"].ndim == 4, stream["obs"].shape[1:]
    action_space = (gym.spaces.Discrete(n) if n else gym.spaces.Box(-1.0, 1.0, stream["action"].shape[1:], np.float32))
    space = gym.spaces.Box(0, 255, shape, np.uint8) if pixels else gym.spaces.Box(-np.inf, np.inf, shape, np.float32)
    planted = {"no_fade": ["buffer.fade=1.0"], "no_infonce": ["agent.infonce_weight=0.0"]}.get(plant, [])
    cfg = task_config(task, len(stream["reward"]) + 10, chain.author, chain.every, planted)
    agent = build_agent(cfg, space, action_space, np.random.default_rng(0))  # as train.py builds agent=mrq|drq
    pairs = {"value": layer_pairs(agent.value, LAYERS["value"]), "policy": layer_pairs(agent.policy_net, LAYERS["policy"]),
             "value_target": layer_pairs(agent.value_target, LAYERS["value"]),
             "policy_target": layer_pairs(agent.policy_target, LAYERS["policy"]),
             "encoder": encoder_pairs(agent.encoder, pixels),
             "encoder_target": encoder_pairs(agent.encoder_target, pixels)}
    start = {k[len("author/start/"):]: v for k, v in author.items() if k.startswith("author/start/")}
    set_state(start, [(p, module, None) for module, p in pairs.items()])
    agent._tf_rng = GraphQueue(list(author["author/noise"]), list(author.get("author/exponential", [])))
    if plant == "copy_late":
        agent.updates.assign(-1)  # the first copy at the second update, and every one after it one late
    if plant == "no_swap":
        agent.start_block = lambda: tf.constant(True)
    learner = CompiledAgent(agent, compile="graph")
    buffer = build_buffer(cfg, space, action_space, np.random.default_rng(0), learner.replay.mask_horizon)
    conventions = AuthorConventions(buffer, stream)
    if chain.author == "mrq":  # DR.Q's return is the usual one, and its reward scale unused
        buffer._n_step_return, buffer.mean_abs_reward = conventions.n_step_return, conventions.mean_abs_reward
    else:  # what DR.Q's InfoNCE sees after a termination (docs/algorithms.md, DR.Q)
        buffer._sequences = conventions.runs
    if plant == "stale_scale":
        first = []
        buffer.mean_abs_reward = lambda eps=1e-8: (first or first.append(conventions.mean_abs_reward()) or first)[0]
    rows = author_rows(stream["terminated"] | stream["truncated"])
    draws = rows[author["author/draws"]]
    assert (draws >= 0).all(), "the author drew a final-observation row"
    queue = [draws]

    def rows_at(values, mass=None):  # the buffer's own signature (mass: the faded draw's, unused here)
        n = len(values)
        out, queue[0] = queue[0][:n], queue[0][n:]
        return out.copy()

    buffer._rows_at = rows_at
    probe_obs, probe_action = stream["obs"][:chain.batch], stream["action"][:chain.batch]

    def outputs() -> dict[str, np.ndarray]:
        zs = agent.encoder.zs(probe_obs)
        action = agent.action_input(tf.constant(probe_action.astype(np.int32) if n else probe_action))
        zsa = agent.encoder.embed(zs, action)
        values = (zs, zsa, agent.encoder.model(zsa), agent.value(zsa), agent.policy_net(zs), agent.encoder_target.zs(probe_obs))
        return {key: np.asarray(v) for key, v in zip(OUTPUTS, values)}

    out = {"td": [], "q": [], "target": [], "priority": [], "chance": []}
    out.update({f"at0/{key}": v for key, v in outputs().items()})
    first_add, done = int(author["author/first_add"]), 0
    for t in range(len(stream["reward"])):
        buffer.add(stream["obs"][t:t + 1], stream["action"][t:t + 1, None] if n else stream["action"][t:t + 1],
                   stream["reward"][t:t + 1], stream["next_obs"][t:t + 1], stream["terminated"][t:t + 1],
                   stream["truncated"][t:t + 1])
        if t < first_add:
            continue
        if done % learner.block.every == 0:  # the loop's block_due, the runs drawn as training draws them
            for i, k in enumerate(learner.block_chunks(chain.batch)):
                learner.run_block(learner.block.replay.draw(buffer, chain.batch, k), start=i == 0)
        metrics = learner.update(learner.replay.draw(buffer, chain.batch, 1))
        buffer.update_priorities(metrics["td_error"])
        done += 1
        out["td"].append(np.asarray(metrics["td_error"]))
        out["q"].append(float(metrics["q"]))
        out["target"].append(float(metrics["target_q"]))
        out["priority"].append(buffer._tree.get(buffer.last_indices))
        out["chance"].append(tfrl_chances(buffer, rows))
        if done in chain.reported():
            out.update({f"at{done}/{key}": v for key, v in outputs().items()})
            if chain.author == "mrq":
                out[f"at{done}/scales"] = np.float32([agent.reward_scale.numpy(), agent.target_reward_scale.numpy()])
        if done == chain.updates:
            break
    return out


def tfrl_chances(buffer, rows: np.ndarray) -> np.ndarray:
    """Each row's chance of being drawn next, as this buffer draws (priority x fade, the rows its mask
    hides drawn again), in the order of the author's rows (`rows`: `author_rows`), its
    final-observation rows at 0; as many as the author's buffer counts after the same adds."""
    held = np.arange(len(buffer))
    mass = buffer._tree.get(held) * buffer._fade_of(held) * (buffer.mask.open[held] if buffer.mask is not None else 1)
    # the author's size counts a final-observation row from the add after it (`add` sets it, `terminal` not)
    size = int(np.flatnonzero(rows == len(buffer) - 1)[0]) + 1
    return np.where(rows[:size] >= 0, mass[np.maximum(rows[:size], 0)], 0.0) / mass.sum()


def compare(mine: dict, theirs: dict, chain: Chain) -> tuple[list[dict], dict[int, dict]]:
    """Per update: the relative difference of the per-sample errors and of the priorities, and the
    difference of the mean Q and mean target in units of the author's mean |Q| and |target| on the
    batch; at the reported updates, of each network's outputs on the probe, as their change since
    the start, each side from its own (outputs rather than weights: a weight whose gradient is rounding noise moves by
    Adam's full step either way, which the outputs barely feel), and of the reward scales."""
    def in_units(key, k):
        return abs(float(mine[key][k]) - float(theirs[key][k])) / max(float(theirs[f"{key}_scale"][k]), 1e-12)

    per_update = [{"LAP error": relative(mine["td"][k], theirs["td"][k]), "mean Q": in_units("q", k),
                   "mean target": in_units("target", k),
                   "priorities": relative(mine["priority"][k], theirs["priority"][k]),
                   "draw chances": (relative(mine["chance"][k], theirs["chance"][k])
                                    if len(mine["chance"][k]) == len(theirs["chance"][k]) else np.inf)}
                  for k in range(chain.updates)]
    at = {}
    for k in (k for k in chain.reported() if f"at{k}/zs" in theirs):  # --updates below the author side's: its own
        row = {key: relative(mine[f"at{k}/{key}"] - mine[f"at0/{key}"], theirs[f"at{k}/{key}"] - theirs[f"at0/{key}"])
               for key in OUTPUTS}
        if f"at{k}/scales" in theirs:
            row["reward scales"] = relative(mine[f"at{k}/scales"], theirs[f"at{k}/scales"])
        at[k] = row
    return per_update, at


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", choices=sorted(TASKS), default="walker")
    parser.add_argument("--updates", type=int, default=500)
    parser.add_argument("--learning-starts", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--batch-size", type=int, default=256, help="both sides' (the author's: 256)")
    parser.add_argument("--copy-every", type=int, default=250, help="updates between target copies, the encoder's "
                        "block as long (the author's: 250)")
    parser.add_argument("--tolerance", type=float, default=10.0, help="times the author's own floor (or 1e-4) that passes")
    parser.add_argument("--author", choices=sorted(PLANTS), default="mrq",
                        help="MR.Q's author's code against agent=mrq, or DR.Q's authors' against agent=drq")
    parser.add_argument("--plant", choices=sorted(set(sum(PLANTS.values(), ()))),
                        help="break one carry on tfrl's side: the check must fail")
    parser.add_argument("--author-data", metavar="NPZ", help="keep the author's side here, or read it from here if it exists")
    parser.add_argument("--author-side", nargs=2, metavar=("OUT", "STREAM"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.plant and args.plant not in PLANTS[args.author]:
        parser.error(f"--plant {args.plant} breaks nothing --author {args.author} has; its plants: "
                     f"{', '.join(PLANTS[args.author])}")
    chain = Chain(args.updates, args.learning_starts, args.seed, args.batch_size, args.copy_every, args.author)
    if args.author_side:
        author_side(*args.author_side, chain)
        return 0
    import subprocess

    from benchmarks.mrq_reference import AUTHORS

    ref, module = AUTHORS[args.author]
    if not (os.path.isfile(os.path.join(ref, f"{module}.py")) and os.path.exists(REFERENCE_PYTHON)):
        sys.exit(f"the authors' {module} is not set up: run `bash benchmarks/setup_sb3.sh` and "
                 f"`bash benchmarks/setup_author.sh {args.author}` once, then this again.")
    with tempfile.TemporaryDirectory() as tmp:
        out = args.author_data or os.path.join(tmp, "author.npz")
        stream_path = out + ".stream.npz"
        if not os.path.exists(out):
            # the author starts a few hundred adds early on short episodes: room for that and the updates
            np.savez(stream_path, **make_stream(args.task, args.learning_starts + args.updates + 50, args.seed))
            subprocess.run([REFERENCE_PYTHON, os.path.abspath(__file__), "--author-side", out, stream_path,
                            "--updates", str(args.updates), "--learning-starts", str(args.learning_starts),
                            "--seed", str(args.seed), "--batch-size", str(args.batch_size),
                            "--copy-every", str(args.copy_every), "--author", args.author], check=True)
        author, stream = dict(np.load(out)), dict(np.load(stream_path))
    theirs = {k[len("author/"):]: v for k, v in author.items() if k.startswith("author/")}
    floor_chain = {k[len("reordered/"):]: v for k, v in author.items() if k.startswith("reordered/")}
    for side in (theirs, floor_chain):  # each update's chances, as the author's side concatenated them
        side["chance"] = np.split(side["chance"], np.cumsum(side["chance_sizes"])[:-1])
    chain = replace(chain, updates=min(args.updates, len(theirs["td"])))
    mine = tfrl_chain(args.task, stream, author, chain, args.plant)
    if os.environ.get("CHAIN_DEBUG"):  # which samples part, update by update
        for k in range(min(chain.updates, 5)):
            gap = np.abs(np.asarray(mine["td"][k]) - theirs["td"][k]) / np.maximum(np.abs(theirs["td"][k]), 1e-6)
            print(f"update {k + 1}: samples apart by > 1e-3: {int((gap > 1e-3).sum())} of {len(gap)}, the largest {gap.max():.1e}")
    ours, at_ours = compare(mine, theirs, chain)
    floor, at_floor = compare(floor_chain, theirs, chain)
    return report(args, chain, ours, floor, at_ours, at_floor)


def report(args, chain: Chain, ours: list[dict], floor: list[dict], at_ours: dict, at_floor: dict) -> int:
    print(f"{args.task}: {chain.updates} updates from the author's fresh agent (batches of {chain.batch}, a copy every "
          f"{chain.every}), {'planted: ' + args.plant if args.plant else 'nothing planted'}; relative difference to "
          f"the author's chain: tfrl's | the author's own with each batch's rows reordered")
    worst = 0.0
    for key in ours[0]:
        cells = []
        for a, b in chain.windows():
            mine = max(row[key] for row in ours[a - 1:b])
            bound = max(row[key] for row in floor[a - 1:b])
            worst = max(worst, mine / max(bound, ROUNDING))
            cells.append(f"  [{a}-{b}] {mine:8.1e} | {bound:7.1e}")
        if os.environ.get("CHAIN_DEBUG"):
            print(key, [f"{k + 1}:{row[key]:.1e}" for k, row in enumerate(ours) if row[key] > 1e-4][:12])
        print(f"  {key:14}" + "".join(cells))
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
