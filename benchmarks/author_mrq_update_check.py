"""Check that tfrl's MR.Q updates compute what the author's code computes (facebookresearch/MRQ,
`Agent.train_encoder` and `Agent.train_rl`): from the same state (every network, target and
AdamW's moments), on the same batches and with the same target-policy noise, a few updates of
each kind on both sides, their outputs and weight changes compared.

    bash benchmarks/setup_sb3.sh && bash benchmarks/setup_author.sh mrq      # once
    uv run python benchmarks/author_mrq_update_check.py       # the author's MR.Q after 1500 steps of Hopper-v5
    uv run python benchmarks/author_mrq_update_check.py --env ALE/Breakout-v5   # pixels and discrete actions
    bash benchmarks/setup_author.sh drq && uv run python benchmarks/author_mrq_update_check.py --author drq

`--author drq` runs DR.Q's authors' code (dmksjfl/DR.Q, `DRQ.Agent`: MR.Q's with an InfoNCE term in the
encoder's loss, no termination term, no reward scaling, the multi-step return stopped at a termination
and discounted into its own term) against tfrl's MR.Q with agent=drq's settings (conf/agent/drq.yaml
and its network), the same way.

This process is tfrl's side; it runs the author's side in SB3's venv on the author's files in
benchmarks/.mrq-ref (this file, `--author-side`). That side trains the author's agent in the
author's loop (`--steps` env steps, learning from `--learning-starts`: two target copies, so
500 encoder and 500 value and policy updates, with AdamW's state from them), then writes its state,
`--batches` batches of each kind drawn from its own buffer (runs of `enc_horizon` steps for the
encoder; `Q_horizon`-step returns, by the author's `multi_step_reward`, for value and policy), the
noise of each value update's target policy, and its state and outputs after each update. tfrl's
MR.Q (agent=mrq, network=mrq) is set to that state and runs the same updates eagerly:

- the encoder: `MRQ.encoder_update` in the author's schedule (the default), the encoder trained the
  author's `encoder`, its target the author's `encoder_target` embedding the next states;
- value then policy: `MRQ.value_update` and `MRQ.policy_update`, the encoder in use the author's
  `encoder` and the target encoder its `encoder_target`, with the author's reward scales.

Each update starts from the author's state after the one before. Compared per update: the value
network's two heads on the batch and the target (relative difference), and per network the
change of its weights by the update (|tfrl's change - the author's| / |the author's|). Beside
each, the author's own update of the batch's rows in another order: the floor that the order of a
sum alone sets (the frameworks' kernels round apart by more). Exits 1 where a difference exceeds
`--tolerance`.

On an Atari game (`--env ALE/<Game>-v5`) the author's agent is its pixel agent with discrete actions,
on gymnasium's AtariPreprocessing (84x84 grey, every 4th frame, no no-ops) with 4 frames stacked and
sticky actions, the author's Atari settings; its convolutional encoder is compared (PyTorch's
(C, H, W) layout against tfrl's (H, W, C)), and the Gumbel-softmax of the target policy and the
policy is fed the same draws on both sides (the author's exponential draws e, tfrl's uniform
u = exp(-e)). The batches are the buffer's frames as sampled: the author's random shift comes
before its update, not in it, and is not compared here.
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks.mrq_reference import NoWriter  # noqa: E402
from benchmarks.update_check import (Queued, author_arguments, reference_data, changes, layer_pairs,  # noqa: E402
                                     keras_weights, prefixed, relative, report, set_state, sub, torch_restore,
                                     torch_save, torch_state)
REF = os.path.join(ROOT, "benchmarks", ".mrq-ref")
GUMBEL_DRAWS = ("exponential_target", "exponential_policy")  # in the order train_rl draws them
HISTORY = 4  # frames stacked on Atari, the author's `history`
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
        return torch.as_tensor(data[key][order]).float()

    for k in range(batches):
        noise = rows(f"rl/{k}/noise")
        # the Gumbel-softmax's exponential draws (discrete actions): the target policy's, then the policy's
        exponentials = [rows(f"rl/{k}/{draw}") for draw in GUMBEL_DRAWS if f"rl/{k}/{draw}" in data]
        real, real_exponential = torch.randn_like, torch.Tensor.exponential_
        torch.randn_like = lambda x, **kw: noise
        torch.Tensor.exponential_ = lambda x, *a, **kw: x.copy_(exponentials.pop(0))
        try:
            q, q_target = agent.train_rl(rows(f"rl/{k}/obs"), rows(f"rl/{k}/action"), rows(f"rl/{k}/next_obs"),
                                         rows(f"rl/{k}/reward")[:, None], rows(f"rl/{k}/not_done")[:, None],
                                         float(data["reward_scale"]), float(data["target_reward_scale"]),
                                         *([NoWriter()] if agent.name == "DR.Q" else []))
        finally:
            torch.randn_like, torch.Tensor.exponential_ = real, real_exponential
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


def author_side(out: str, env_id: str, steps: int, learning_starts: int, batches: int, seed: int,
                which: str = "mrq") -> None:
    import gymnasium as gym
    import torch

    from benchmarks.mrq_reference import author_agent, author_mrq, author_step

    MRQ, _ = author_mrq(which)
    torch.set_num_threads(1)
    if env_id.startswith("ALE/"):  # the author's Atari settings: 84x84 grey frames, 4 stacked, every 4th, sticky actions
        import ale_py

        gym.register_envs(ale_py)
        env = gym.make(env_id, frameskip=1, repeat_action_probability=0.25)
        env = gym.wrappers.FrameStackObservation(gym.wrappers.AtariPreprocessing(env, noop_max=0), HISTORY)
        agent = author_agent(MRQ, env, seed, learning_starts, history=HISTORY)
    else:
        env = gym.make(env_id)
        agent = author_agent(MRQ, env, seed, learning_starts)
    image = np.uint8 if agent.pixel_obs else np.float32  # the author's buffer holds frames as uint8
    state, _ = env.reset(seed=seed)
    for _ in range(steps):
        state, ended = author_step(agent, env, state)
        if ended:
            state, _ = env.reset()

    buf = agent.replay_buffer
    data = {"reward_scale": np.float32(agent.reward_scale), "target_reward_scale": np.float32(agent.target_reward_scale),
            "terminates": np.float32(buf.env_terminates), "discount": np.float32(agent.discount),
            "max_action": np.float32(agent.max_action), "discrete": np.bool_(agent.discrete)}
    data.update(prefixed("start", author_state(agent)))
    if which == "drq":  # its multi-step return's second term is the whole discount of the target
        data["discount"] = np.float32(1.0)
    for k in range(batches):
        s, a, ns, r, nd = buf.sample(agent.Q_horizon, include_intermediate=False)
        r, nd = (MRQ.multi_step_reward(r, nd, agent.discount) if which == "drq"
                 else MRQ.multi_step_reward(r, nd, agent.gammas))
        data.update({f"rl/{k}/obs": s.numpy().astype(image), f"rl/{k}/action": a.numpy(),
                     f"rl/{k}/next_obs": ns.numpy().astype(image), f"rl/{k}/reward": r.numpy()[:, 0],
                     f"rl/{k}/not_done": nd.numpy()[:, 0],
                     f"rl/{k}/noise": np.random.standard_normal(a.shape).astype(np.float32)})
        if agent.discrete:
            data.update({f"rl/{k}/{draw}": np.random.standard_exponential(a.shape).astype(np.float32)
                         for draw in GUMBEL_DRAWS})
        s, a, ns, r, nd = buf.sample(agent.enc_horizon, include_intermediate=True)
        data.update({f"enc/{k}/obs": s.numpy().astype(image), f"enc/{k}/action": a.numpy(),
                     f"enc/{k}/next_obs": ns.numpy().astype(image),
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
    "zs_pixels": {**{f"conv{i}": f"zs_cnn{i}" for i in range(1, 5)}, "out": "zs_lin"},
    "zsa": {"za": "za", "l1": "zsa.l1", "l2": "zsa.l2", "out": "zsa.l3"},
    "model": {"out": "model"},
    "policy": {"l1": "policy.l1", "l2": "policy.l2", "out": "policy.l3"},
    "value": {f"q{k}_{ours}": f"q{k}.{theirs}" for k in (1, 2)
              for ours, theirs in (("l1", "q1.l1"), ("l2", "q1.l2"), ("out", "q1.l3"), ("value", "q2"))},
}


def encoder_pairs(encoder, pixels: bool) -> list[tuple]:
    kinds = ("zs_pixels" if pixels else "zs", "zsa", "model")
    return sum((layer_pairs(part, LAYERS[kind]) for part, kind in zip(encoder, kinds)), [])


def tensors(fields) -> list:
    """The inputs as tfrl's update takes them: frames uint8, discrete actions int32, the rest float32."""
    import tensorflow as tf

    return [tf.constant(x if x.dtype in (np.uint8, np.int32) else np.asarray(x, np.float32)) for x in fields]


def drq_agent(obs_shape: tuple, action_dim: int, discrete: bool, max_action: float):
    """tfrl's MR.Q with agent=drq's settings (its agent and network config) for these spaces."""
    import gymnasium as gym

    from training.builder import build_agent
    from training.config import compose_config

    cfg = compose_config(["agent=drq", "env=dmc" if len(obs_shape) == 1 else "env=atari"])
    obs_space = gym.spaces.Box(0, 255, obs_shape, np.uint8) if len(obs_shape) == 3 else \
        gym.spaces.Box(-np.inf, np.inf, obs_shape, np.float32)
    action_space = gym.spaces.Discrete(action_dim) if discrete else \
        gym.spaces.Box(-max_action, max_action, (action_dim,), np.float32)
    return build_agent(cfg, obs_space, action_space, np.random.default_rng(0))


def tfrl_side(data: dict, batches: int, which: str = "mrq") -> tuple[list[dict], list[dict]]:
    import tensorflow as tf

    from agents.mrq import MRQ
    from buffers.types import Batch, Sequences
    from agents.mrq.networks import MRQNetworks

    obs, action_dim = data["rl/0/obs"], data["rl/0/action"].shape[1]
    pixels, discrete = obs.ndim == 4, bool(data.get("discrete", False))
    if which == "drq":
        agent = drq_agent(obs.shape[2:] + obs.shape[1:2] if pixels else obs.shape[1:], action_dim, discrete,
                          float(data["max_action"]))
    elif discrete:
        agent = MRQ(obs.shape[2:] + obs.shape[1:2] if pixels else obs.shape[1:], MRQNetworks(), np.random.default_rng(0),
                    num_actions=action_dim)
    else:
        high = np.full(action_dim, float(data["max_action"]), np.float32)
        agent = MRQ(obs.shape[1:], MRQNetworks(), np.random.default_rng(0), action_low=-high, action_high=high)

    def images(x):  # the author's frames are (..., C, H, W), tfrl's (..., H, W, C)
        return np.moveaxis(x, -3, -1) if pixels else x

    def actions(a):  # the author's one-hot or in [-1, 1], tfrl's stored index or in the env's units
        return a.argmax(-1).astype(np.int32) if discrete else a * float(data["max_action"])
    agent._tf_rng = Queued()
    if which != "drq":  # DR.Q's authors keep the buffer's reward scale but never use it: tfrl's stays 1
        agent.reward_scale.assign(float(data["reward_scale"]))
        agent.target_reward_scale.assign(float(data["target_reward_scale"]))
    # tfrl's networks under the author's modules (its encoder schedule, the default: the encoder in use
    # is the one trained, against the encoder target)
    trained = [(layer_pairs(agent.value, LAYERS["value"]), "value", agent.value_optimizer),
               (layer_pairs(agent.policy_net, LAYERS["policy"]), "policy", agent.policy_optimizer)]
    rl = trained + [(layer_pairs(agent.value_target, LAYERS["value"]), "value_target", None),
                    (layer_pairs(agent.policy_target, LAYERS["policy"]), "policy_target", None),
                    (encoder_pairs(agent.encoder, pixels), "encoder", None),
                    (encoder_pairs(agent.encoder_target, pixels), "encoder_target", None)]
    enc = [(encoder_pairs(agent.encoder, pixels), "encoder", agent.encoder_optimizer),
           (encoder_pairs(agent.encoder_target, pixels), "encoder_target", None)]
    ours, floor = [], []
    for k in range(batches):
        before = sub(data, "start" if k == 0 else f"author/rl/{k - 1}")
        set_state(before, rl)
        # the same draws: the target's normal noise, and for discrete actions the Gumbel noise
        # -log(e) of the author's exponential draws e as -log(-log(u)) of uniforms u = exp(-e)
        agent._tf_rng = Queued([tf.constant(data[f"rl/{k}/noise"])],
                               [tf.constant(np.exp(-data[f"rl/{k}/{draw}"].astype(np.float64)).astype(np.float32))
                                for draw in GUMBEL_DRAWS if f"rl/{k}/{draw}" in data])
        reward, not_done = data[f"rl/{k}/reward"], data[f"rl/{k}/not_done"]
        batch = Batch(images(data[f"rl/{k}/obs"]), actions(data[f"rl/{k}/action"]), reward,
                      images(data[f"rl/{k}/next_obs"]), float(data["discount"]) * not_done, np.ones_like(reward))
        batch = Batch(*tensors(batch))
        _, q, target = agent.value_update(batch)
        agent.policy_update(batch.obs)
        theirs, reordered = sub(data, f"author/rl/{k}"), sub(data, f"reordered/rl/{k}")
        ours.append({"value heads": relative(q.numpy(), theirs["q"]), "value target": relative(target.numpy(), theirs["target"]),
                     **changes(keras_weights(trained), theirs, before, ["value", "policy"])})
        floor.append({"value heads": relative(reordered["q"], theirs["q"]),
                      "value target": relative(reordered["target"], theirs["target"]),
                      **changes(reordered, theirs, before, ["value", "policy"])})
    for k in range(batches):
        before = sub(data, f"author/rl/{batches - 1}" if k == 0 else f"author/enc/{k - 1}")
        set_state(before, enc)
        runs = Sequences(images(data[f"enc/{k}/obs"][:, 0]), actions(data[f"enc/{k}/action"]),
                         data[f"enc/{k}/reward"], images(data[f"enc/{k}/next_obs"]), 1.0 - data[f"enc/{k}/not_done"])
        agent.encoder_update(Sequences(*tensors(runs)), tf.constant(float(data["terminates"])))
        theirs = sub(data, f"author/enc/{k}")
        ours[k].update(changes(keras_weights(enc[:1]), theirs, before, ["encoder"]))
        floor[k].update(changes(sub(data, f"reordered/enc/{k}"), theirs, before, ["encoder"]))
    return ours, floor


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=1500, help="env steps of the author's loop before the check")
    parser.add_argument("--learning-starts", type=int, default=1000)
    parser.add_argument("--author", choices=("mrq", "drq"), default="mrq",
                        help="MR.Q's author's code, or DR.Q's authors' against agent=drq's settings")
    author_arguments(parser, "updates of each kind to compare")
    args = parser.parse_args()
    if args.author_side:
        author_side(args.author_side[0], args.env, args.steps, args.learning_starts, args.batches, args.seed, args.author)
        return
    from benchmarks.mrq_reference import AUTHORS

    ref, module = AUTHORS[args.author]
    data = reference_data(__file__, args.author_data, os.path.isfile(os.path.join(ref, f"{module}.py")),
                          f"the authors' {args.author} is not set up: run `bash benchmarks/setup_sb3.sh` and "
                          f"`bash benchmarks/setup_author.sh {args.author}` once, then this again.",
                          ["--env", args.env, "--steps", str(args.steps), "--learning-starts", str(args.learning_starts),
                           "--batches", str(args.batches), "--seed", str(args.seed), "--author", args.author])
    ours, floor = tfrl_side(data, int(data["batches"]), args.author)
    sys.exit(report(f"{args.env}, the {args.author} authors' agent after {int(data['updates'])} updates; relative "
                    f"difference to the authors' update: tfrl's | the authors' own with the rows reordered", ours, floor,
                    args.tolerance))


if __name__ == "__main__":
    main()
