"""Check that tfrl's MR.Q updates compute what the author's code computes (facebookresearch/MRQ,
`Agent.train_encoder` and `Agent.train_rl`): from the same state (every network, target and
AdamW's moments), on the same batches and with the same target-policy noise, a few updates of
each kind on both sides, their outputs and weight changes compared.

    bash benchmarks/setup_sb3.sh && bash benchmarks/setup_author.sh mrq      # once
    uv run python benchmarks/author_mrq_update_check.py       # the author's MR.Q after 1500 steps of Hopper-v5

This process is tfrl's side; it runs the author's side in SB3's venv on the author's files in
benchmarks/.mrq-ref (this file, `--author-side`). That side trains the author's agent in the
author's loop (`--steps` env steps, learning from `--learning-starts`: two target copies, so
500 encoder and 500 value and policy updates, with AdamW's state from them), then writes its state,
`--batches` batches of each kind drawn from its own buffer (runs of `enc_horizon` steps for the
encoder; `Q_horizon`-step returns, by the author's `multi_step_reward`, for value and policy), the
noise of each value update's target policy, and its state and outputs after each update. tfrl's
MR.Q (agent=mrq, network=mrq) is set to that state and runs the same updates eagerly:

- the encoder: `MRQ.encoder_update` on the trained copy (`encoder_next`, the author's `encoder`)
  with the encoder in use (the author's `encoder_target`) embedding the next states;
- value then policy: `MRQ.value_update` and `MRQ.policy_update`, the encoder in use the author's
  `encoder` and the target encoder its `encoder_target`, with the author's reward scales.

Each update starts from the author's state after the one before. Compared per update: the value
network's two heads on the batch and the target (relative difference), and per network the
change of its weights by the update (|tfrl's change - the author's| / |the author's|). Beside
each, the author's own update of the batch's rows in another order: the floor that the order of a
sum alone sets (the frameworks' kernels round apart by more). Exits 1 where a difference exceeds
`--tolerance`. Vector observations and continuous actions: the pixel encoder and discrete actions
are not covered here.
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks.update_check import (Queued, author_arguments, author_data, changes, dense_pairs,  # noqa: E402
                                     keras_weights, prefixed, relative, report, set_state, sub, torch_restore,
                                     torch_save, torch_state)
REF = os.path.join(ROOT, "benchmarks", ".mrq-ref")
MODULES = ("encoder", "encoder_target", "policy", "policy_target", "value", "value_target")
OPTIMIZERS = {"encoder": "encoder_optimizer", "policy": "policy_optimizer", "value": "value_optimizer"}


# --- the author's side (SB3's venv: torch, no TensorFlow) -----------------------------------------
def author_state(agent) -> dict[str, np.ndarray]:
    return torch_state(agent, MODULES, OPTIMIZERS)


def save(agent):
    return torch_save(agent, MODULES + tuple(OPTIMIZERS.values()))


def restore(agent, saved) -> None:
    torch_restore(agent, MODULES + tuple(OPTIMIZERS.values()), saved)


def author_updates(agent, data: dict, batches: int, order: np.ndarray, after: list | None = None) -> tuple[dict, list]:
    """The author's value-and-policy updates (`train_rl`), then encoder updates (`train_encoder`),
    on the written batches with their rows in `order`: per update its outputs and state, and its
    saves; after update k it is reset to `after[k]` if given."""
    import torch

    out, saves = {}, []

    def rows(key):
        return torch.as_tensor(data[key][order])

    for k in range(batches):
        noise = rows(f"rl/{k}/noise")
        real = torch.randn_like
        torch.randn_like = lambda x, **kw: noise
        try:
            q, q_target = agent.train_rl(rows(f"rl/{k}/obs"), rows(f"rl/{k}/action"), rows(f"rl/{k}/next_obs"),
                                         rows(f"rl/{k}/reward")[:, None], rows(f"rl/{k}/not_done")[:, None],
                                         float(data["reward_scale"]), float(data["target_reward_scale"]))
        finally:
            torch.randn_like = real
        unorder = np.argsort(order)  # the outputs in the written rows' order
        out[f"rl/{k}/q"], out[f"rl/{k}/target"] = q.detach().numpy()[unorder], q_target.detach().numpy()[unorder, 0]
        out.update(prefixed(f"rl/{k}", author_state(agent)))
        saves.append(save(agent))
        if after:
            restore(agent, after[k])
    for k in range(batches):
        agent.train_encoder(rows(f"enc/{k}/obs"), rows(f"enc/{k}/action"), rows(f"enc/{k}/next_obs"),
                            rows(f"enc/{k}/reward")[..., None], rows(f"enc/{k}/not_done")[..., None],
                            bool(data["terminates"]))
        out.update(prefixed(f"enc/{k}", author_state(agent)))
        saves.append(save(agent))
        if after:
            restore(agent, after[batches + k])
    return out, saves


def author_side(out: str, env_id: str, steps: int, learning_starts: int, batches: int, seed: int) -> None:
    import gymnasium as gym
    import torch

    from benchmarks.mrq_reference import author_agent, author_mrq, author_step

    MRQ, _ = author_mrq()
    torch.set_num_threads(1)
    env = gym.make(env_id)
    agent = author_agent(MRQ, env, seed, learning_starts)
    state, _ = env.reset(seed=seed)
    for _ in range(steps):
        state, ended = author_step(agent, env, state)
        if ended:
            state, _ = env.reset()

    buf = agent.replay_buffer
    data = {"reward_scale": np.float32(agent.reward_scale), "target_reward_scale": np.float32(agent.target_reward_scale),
            "terminates": np.float32(buf.env_terminates), "discount": np.float32(agent.discount),
            "max_action": np.float32(agent.max_action)}
    data.update(prefixed("start", author_state(agent)))
    for k in range(batches):
        s, a, ns, r, nd = buf.sample(agent.Q_horizon, include_intermediate=False)
        r, nd = MRQ.multi_step_reward(r, nd, agent.gammas)
        data.update({f"rl/{k}/obs": s.numpy(), f"rl/{k}/action": a.numpy(), f"rl/{k}/next_obs": ns.numpy(),
                     f"rl/{k}/reward": r.numpy()[:, 0], f"rl/{k}/not_done": nd.numpy()[:, 0],
                     f"rl/{k}/noise": np.random.standard_normal(a.shape).astype(np.float32)})
        s, a, ns, r, nd = buf.sample(agent.enc_horizon, include_intermediate=True)
        data.update({f"enc/{k}/obs": s.numpy(), f"enc/{k}/action": a.numpy(), f"enc/{k}/next_obs": ns.numpy(),
                     f"enc/{k}/reward": r.numpy()[..., 0], f"enc/{k}/not_done": nd.numpy()[..., 0]})
    batch_size = data["rl/0/obs"].shape[0]
    start = save(agent)
    results, saves = author_updates(agent, data, batches, np.arange(batch_size))
    data.update(prefixed("author", results))
    restore(agent, start)  # the floor: the same updates from the same states, the rows reordered
    data.update(prefixed("reordered", author_updates(agent, data, batches, np.random.permutation(batch_size), saves)[0]))
    data["updates"], data["batches"] = np.int64(agent.training_steps), np.int64(batches)
    np.savez(out, **data)


# --- tfrl's side ----------------------------------------------------------------------------------
# the author's module of each of tfrl's Dense layers, by the layer's name after its model's
LAYERS = {
    "zs": {"l1": "zs_mlp.l1", "l2": "zs_mlp.l2", "out": "zs_mlp.l3"},
    "zsa": {"za": "za", "l1": "zsa.l1", "l2": "zsa.l2", "out": "zsa.l3"},
    "model": {"out": "model"},
    "policy": {"l1": "policy.l1", "l2": "policy.l2", "out": "policy.l3"},
    "value": {f"q{k}_{ours}": f"q{k}.{theirs}" for k in (1, 2)
              for ours, theirs in (("l1", "q1.l1"), ("l2", "q1.l2"), ("out", "q1.l3"), ("value", "q2"))},
}


def encoder_pairs(encoder) -> list[tuple]:
    return sum((dense_pairs(part, LAYERS[kind]) for part, kind in zip(encoder, ("zs", "zsa", "model"))), [])


def tfrl_side(data: dict, batches: int) -> tuple[list[dict], list[dict]]:
    import tensorflow as tf

    from agents.mrq import MRQ
    from buffers.types import Batch, Sequences
    from networks.mrq import MRQNetworks

    obs_dim, action_dim = data["rl/0/obs"].shape[1], data["rl/0/action"].shape[1]
    high = np.full(action_dim, float(data["max_action"]), np.float32)
    agent = MRQ((obs_dim,), MRQNetworks(), np.random.default_rng(0), action_low=-high, action_high=high)
    agent._tf_rng = Queued()
    agent.reward_scale.assign(float(data["reward_scale"]))
    agent.target_reward_scale.assign(float(data["target_reward_scale"]))
    # tfrl's networks under the author's modules: for value and policy the author's `encoder` is the
    # encoder in use; for the encoder's update it is the trained copy, and its `encoder_target` the one in use
    trained = [(dense_pairs(agent.value, LAYERS["value"]), "value", agent.value_optimizer),
               (dense_pairs(agent.policy_net, LAYERS["policy"]), "policy", agent.policy_optimizer)]
    rl = trained + [(dense_pairs(agent.value_target, LAYERS["value"]), "value_target", None),
                    (dense_pairs(agent.policy_target, LAYERS["policy"]), "policy_target", None),
                    (encoder_pairs(agent.encoder), "encoder", None),
                    (encoder_pairs(agent.encoder_target), "encoder_target", None)]
    enc = [(encoder_pairs(agent.encoder_next), "encoder", agent.encoder_optimizer),
           (encoder_pairs(agent.encoder), "encoder_target", None)]
    ours, floor = [], []
    for k in range(batches):
        before = sub(data, "start" if k == 0 else f"author/rl/{k - 1}")
        set_state(before, rl)
        agent._tf_rng.noise = [tf.constant(data[f"rl/{k}/noise"])]
        reward, not_done = data[f"rl/{k}/reward"], data[f"rl/{k}/not_done"]
        batch = Batch(data[f"rl/{k}/obs"], data[f"rl/{k}/action"] * float(data["max_action"]), reward,
                      data[f"rl/{k}/next_obs"], float(data["discount"]) * not_done, np.ones_like(reward))
        _, q, target = agent.value_update(Batch(*(tf.constant(np.asarray(x, np.float32)) for x in batch)))
        agent.policy_update(tf.constant(batch.obs))
        theirs, reordered = sub(data, f"author/rl/{k}"), sub(data, f"reordered/rl/{k}")
        ours.append({"value heads": relative(q.numpy(), theirs["q"]), "value target": relative(target.numpy(), theirs["target"]),
                     **changes(keras_weights(trained), theirs, before, ["value", "policy"])})
        floor.append({"value heads": relative(reordered["q"], theirs["q"]),
                      "value target": relative(reordered["target"], theirs["target"]),
                      **changes(reordered, theirs, before, ["value", "policy"])})
    for k in range(batches):
        before = sub(data, f"author/rl/{batches - 1}" if k == 0 else f"author/enc/{k - 1}")
        set_state(before, enc)
        runs = Sequences(data[f"enc/{k}/obs"][:, 0], data[f"enc/{k}/action"] * float(data["max_action"]),
                         data[f"enc/{k}/reward"], data[f"enc/{k}/next_obs"], 1.0 - data[f"enc/{k}/not_done"])
        agent.encoder_update(Sequences(*(tf.constant(np.asarray(x, np.float32)) for x in runs)),
                             tf.constant(float(data["terminates"])))
        theirs = sub(data, f"author/enc/{k}")
        ours[k].update(changes(keras_weights(enc[:1]), theirs, before, ["encoder"]))
        floor[k].update(changes(sub(data, f"reordered/enc/{k}"), theirs, before, ["encoder"]))
    return ours, floor


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=1500, help="env steps of the author's loop before the check")
    parser.add_argument("--learning-starts", type=int, default=1000)
    author_arguments(parser, "updates of each kind to compare")
    args = parser.parse_args()
    if args.author_side:
        author_side(args.author_side[0], args.env, args.steps, args.learning_starts, args.batches, args.seed)
        return
    data = author_data(__file__, args.author_data, os.path.isfile(os.path.join(REF, "MRQ.py")),
                       "the author's MR.Q is not set up: run `bash benchmarks/setup_sb3.sh` and "
                       "`bash benchmarks/setup_author.sh mrq` once, then this again.",
                       ["--env", args.env, "--steps", str(args.steps), "--learning-starts", str(args.learning_starts), "--batches", str(args.batches),
                        "--seed", str(args.seed)])
    ours, floor = tfrl_side(data, int(data["batches"]))
    sys.exit(report(f"{args.env}, the author's agent after {int(data['updates'])} updates; relative difference to the "
                    f"author's update: tfrl's | the author's own with the rows reordered", ours, floor, args.tolerance))


if __name__ == "__main__":
    main()
