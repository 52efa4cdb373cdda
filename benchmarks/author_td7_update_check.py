"""Check that tfrl's TD7 update computes what the author's code computes (sfujim/TD7's
`Agent.train()`: SALE's encoder, the critic on the fixed encoders with the clipped target and
LAP's Huber loss, the delayed actor): from the same state (every network, target and fixed
encoder, Adam's moments, the value-clipping range), on the same batches and with the same target
policy noise, a few updates on both sides, their TD errors and weight changes compared.

    bash benchmarks/setup_sb3.sh && bash benchmarks/setup_author.sh td7      # once
    uv run python benchmarks/author_td7_update_check.py       # the author's TD7 after 249 updates on Hopper-v5

This process is tfrl's side; it runs the author's side in SB3's venv on the author's files in
benchmarks/.td7-ref (this file, `--author-side`). That side fills the author's LAP buffer with
`--steps` random-action transitions of the env and trains the author's agent on them with
`--updates` calls of `train()`, then writes its state, `--batches` batches drawn from its buffer
and the standard-normal noise of each target action, and its state, TD errors and clipping range
after each `train()` on them. tfrl's TD7 (agent=td7, network=sale) is set to that state and runs
`update` eagerly on the same batches with the same noise. At the default 249 the first compared
update is the author's 250th: its next values are clipped to the range [0, 0] the author starts
with (so value clipping acts on every row), then the targets and fixed encoders are copied and the
range set; the actor steps in updates 0 and 2. Later states clip few or no rows.

Each update starts from the author's state after the one before. Compared per update: the TD
errors |Q - target| (the priorities' source), the value-clipping range after the update, and per
network the change of its weights (|tfrl's change - the author's| / |the author's|); beside each,
the author's own update of the batch's rows in another order. Exits 1 where a difference exceeds
`--tolerance`. The policy checkpoints (the loop's, not the update's) are not covered here.
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks.update_check import (Queued, author_arguments, reference_data, changes, layer_pairs,  # noqa: E402
                                     keras_weights, prefixed, relative, report, set_state, sub, torch_restore,
                                     torch_save, torch_state)

REF = os.path.join(ROOT, "benchmarks", ".td7-ref")
MODULES = ("encoder", "fixed_encoder", "fixed_encoder_target", "actor", "actor_target", "critic", "critic_target")
OPTIMIZERS = {"encoder": "encoder_optimizer", "actor": "actor_optimizer", "critic": "critic_optimizer"}
SCALARS = ("max", "min", "max_target", "min_target", "training_steps")


# --- the author's side (SB3's venv: torch, no TensorFlow) -----------------------------------------
def author_state(agent) -> dict[str, np.ndarray]:
    return {**torch_state(agent, MODULES, OPTIMIZERS), **{s: np.float64(getattr(agent, s)) for s in SCALARS}}


def save(agent):
    return torch_save(agent, MODULES + tuple(OPTIMIZERS.values())), {s: getattr(agent, s) for s in SCALARS}


def restore(agent, saved) -> None:
    torch_restore(agent, MODULES + tuple(OPTIMIZERS.values()), saved[0])
    for s, value in saved[1].items():
        setattr(agent, s, value)


class OneBatch:
    """Stands in for the author's LAP buffer in `train()`: hands out one batch, keeps the priorities."""

    def __init__(self, batch):
        self.batch, self.priority = batch, None

    def sample(self):
        return self.batch

    def update_priority(self, priority):
        self.priority = priority.detach().numpy().reshape(-1)

    def reset_max_priority(self):
        pass


def author_updates(agent, data: dict, batches: int, order: np.ndarray, after: list | None = None) -> tuple[dict, list]:
    """The author's `train()` on each written batch, its rows in `order`: per update its state and
    LAP priorities (in the written rows' order), and its saves; reset to `after[k]` if given."""
    import torch

    out, saves, unorder = {}, [], np.argsort(order)
    for k in range(batches):
        def rows(key):
            return torch.as_tensor(data[f"{k}/{key}"][order])

        buffer = OneBatch((rows("obs"), rows("action"), rows("next_obs"), rows("reward")[:, None], rows("not_done")[:, None]))
        agent.replay_buffer, noise, real = buffer, rows("noise"), torch.randn_like
        torch.randn_like = lambda x, **kw: noise
        try:
            agent.train()
        finally:
            torch.randn_like = real
        out[f"{k}/priority"] = buffer.priority[unorder]
        out.update(prefixed(str(k), author_state(agent)))
        saves.append(save(agent))
        if after:
            restore(agent, after[k])
    return out, saves


def author_side(out: str, env_id: str, steps: int, updates: int, batches: int, seed: int) -> None:
    import gymnasium as gym
    import torch

    from benchmarks.td7_reference import author_td7

    TD7, _ = author_td7()
    torch.set_num_threads(1)
    torch.manual_seed(seed)
    np.random.seed(seed)
    env = gym.make(env_id)
    env.action_space.seed(seed)
    agent = TD7.Agent(env.observation_space.shape[0], env.action_space.shape[0], float(env.action_space.high[0]))
    state, _ = env.reset(seed=seed)
    for _ in range(steps):  # random actions, stored as the author's loop stores them (truncation is no terminal)
        action = env.action_space.sample()
        next_state, reward, terminated, truncated, _ = env.step(action)
        agent.replay_buffer.add(state, action, next_state, reward, float(terminated))
        state = next_state
        if terminated or truncated:
            state, _ = env.reset()
    for _ in range(updates):
        agent.train()

    buf = agent.replay_buffer
    data = {"discount": np.float32(agent.hp.discount), "max_action": np.float32(agent.max_action),
            "min_priority": np.float32(agent.hp.min_priority), "alpha": np.float32(agent.hp.alpha),
            "batches": np.int64(batches)}
    data.update(prefixed("start", author_state(agent)))
    for k in range(batches):
        s, a, ns, r, nd = buf.sample()
        data.update({f"{k}/obs": s.numpy(), f"{k}/action": a.numpy(), f"{k}/next_obs": ns.numpy(),
                     f"{k}/reward": r.numpy()[:, 0], f"{k}/not_done": nd.numpy()[:, 0],
                     f"{k}/noise": np.random.standard_normal(a.shape).astype(np.float32)})
    batch_size = data["0/obs"].shape[0]
    start = save(agent)
    results, saves = author_updates(agent, data, batches, np.arange(batch_size))
    data.update(prefixed("author", results))
    restore(agent, start)  # the floor: the same updates from the same states, the rows reordered
    data.update(prefixed("reordered", author_updates(agent, data, batches, np.random.permutation(batch_size), saves)[0]))
    np.savez(out, **data)


# --- tfrl's side ----------------------------------------------------------------------------------
# the author's module of each of tfrl's Dense layers, by the layer's name after its model's
LAYERS = {
    "zs": {"h0": "zs1", "h1": "zs2", "out": "zs3"},
    "zsa": {"h0": "zsa1", "h1": "zsa2", "out": "zsa3"},
    "actor": {"l0": "l0", "l1": "l1", "l2": "l2", "out": "l3"},
    "critic": {f"q{k}_{ours}": theirs for k, names in ((1, ("q01", "q1", "q2", "q3")), (2, ("q02", "q4", "q5", "q6")))
               for ours, theirs in zip(("l0", "l1", "l2", "out"), names)},
}


def encoder_pairs(encoder) -> list[tuple]:
    return layer_pairs(encoder.zs, LAYERS["zs"]) + layer_pairs(encoder.zsa, LAYERS["zsa"])


def tfrl_side(data: dict, batches: int) -> tuple[list[dict], list[dict]]:
    import tensorflow as tf

    from agents.td7 import TD7
    from buffers.types import Batch
    from networks.sale import SALE

    obs_dim, action_dim = data["0/obs"].shape[1], data["0/action"].shape[1]
    high = np.full(action_dim, float(data["max_action"]), np.float32)
    agent = TD7(obs_dim, -high, high, SALE(), np.random.default_rng(0))
    agent._tf_rng = Queued()
    trained = [(encoder_pairs(agent.encoder), "encoder", agent.encoder_optimizer),
               (layer_pairs(agent.actor, LAYERS["actor"]), "actor", agent.actor_optimizer),
               (layer_pairs(agent.critic, LAYERS["critic"]), "critic", agent.critic_optimizer)]
    targets = trained + [(encoder_pairs(agent.fixed_encoder), "fixed_encoder", None),
                         (encoder_pairs(agent.fixed_target_encoder), "fixed_encoder_target", None),
                         (layer_pairs(agent.actor_target, LAYERS["actor"]), "actor_target", None),
                         (layer_pairs(agent.critic_target, LAYERS["critic"]), "critic_target", None)]
    scalars = {"max": agent.value_max, "min": agent.value_min, "max_target": agent.target_max,
               "min_target": agent.target_min, "training_steps": agent.updates}
    ours, floor = [], []
    for k in range(batches):
        before = sub(data, "start" if k == 0 else f"author/{k - 1}")
        set_state(before, targets)
        for key, var in scalars.items():
            var.assign(tf.cast(before[key], var.dtype))
        agent._tf_rng.noise = [tf.constant(data[f"{k}/noise"])]
        reward = data[f"{k}/reward"]
        batch = Batch(data[f"{k}/obs"], data[f"{k}/action"] * float(data["max_action"]), reward, data[f"{k}/next_obs"],
                      float(data["discount"]) * data[f"{k}/not_done"], np.ones_like(reward))
        out = agent.update(Batch(*(tf.constant(np.asarray(x, np.float32)) for x in batch)))
        priority = np.maximum(out["td_error"].numpy(), float(data["min_priority"])) ** float(data["alpha"])
        theirs, reordered = sub(data, f"author/{k}"), sub(data, f"reordered/{k}")
        clipping = [float(v.numpy()) for v in (agent.value_max, agent.value_min)]
        ours.append({"LAP priority": relative(priority, theirs["priority"]),
                     "clipping range": relative(clipping, [theirs["max"], theirs["min"]]),
                     **changes(keras_weights(trained), theirs, before, ["encoder", "critic", "actor"])})
        floor.append({"LAP priority": relative(reordered["priority"], theirs["priority"]),
                      "clipping range": relative([reordered["max"], reordered["min"]], [theirs["max"], theirs["min"]]),
                      **changes(reordered, theirs, before, ["encoder", "critic", "actor"])})
    return ours, floor


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=5000, help="random-action transitions in the author's buffer")
    parser.add_argument("--updates", type=int, default=249, help="the author's updates before the check")
    author_arguments(parser, "updates to compare")
    args = parser.parse_args()
    if args.author_side:
        author_side(args.author_side[0], args.env, args.steps, args.updates, args.batches, args.seed)
        return
    data = reference_data(__file__, args.author_data, os.path.isfile(os.path.join(REF, "TD7.py")),
                       "the author's TD7 is not set up: run `bash benchmarks/setup_sb3.sh` and "
                       "`bash benchmarks/setup_author.sh td7` once, then this again.",
                       ["--env", args.env, "--steps", str(args.steps), "--updates", str(args.updates), "--batches", str(args.batches),
                        "--seed", str(args.seed)])
    ours, floor = tfrl_side(data, int(data["batches"]))
    sys.exit(report(f"{args.env}, the author's TD7 after {int(data['start/training_steps'])} updates; relative difference to the author's "
                    f"update: tfrl's | the author's own with the rows reordered", ours, floor, args.tolerance))


if __name__ == "__main__":
    main()
