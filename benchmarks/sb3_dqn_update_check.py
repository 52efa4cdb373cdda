"""Check that tfrl's DQN update on Atari or MinAtar computes what Stable-Baselines3's `DQN.train()`
computes: from the same state (the CNN's weights, its target and Adam's moments), on the same
minibatches of frames, a few updates on each side, their losses and weight changes compared.
The pixel path end to end: uint8 frames scaled to [0, 1], the convolutions (PyTorch's (C, H, W)
layout against tfrl's (H, W, C), and the flattening between them), the max over the target's
Q-values, the Huber loss, the gradient clip at norm 10 and Adam.

    bash benchmarks/setup_sb3.sh                           # once
    uv run python benchmarks/sb3_dqn_update_check.py       # SB3's DQN after 2500 steps of Breakout
    uv run python benchmarks/sb3_dqn_update_check.py --env MinAtar/breakout    # the minatar_dqn study's SB3 side

This process is tfrl's side; it runs SB3's side in SB3's venv (this file, `--sb3-side`). That side
trains SB3's DQN with the RL Zoo's Atari settings (conf/tuned/dqn_atari.yaml: the Nature CNN, lr
1e-4, batch 32, an update every 4 steps, gradients clipped at 10) on `--env` through SB3's
AtariWrapper and 4 stacked frames, learning from step `--learning-starts` (so Adam's moments are
those of a few hundred updates), then writes its state, `--batches` minibatches from its replay
buffer (terminated where the episode ended, life losses included, as SB3 stores them) and its
loss and state after each update. tfrl's DQN (agent=dqn network=nature_cnn, plain DQN) is set to
that state and runs its update eagerly. Each update starts from SB3's state after the one before.

On MinAtar (`--env MinAtar/<game>`) both sides are the minatar_dqn study's: SB3's DQN as
benchmarks/sb3_learning.py builds it from `agent=dqn env=minatar` (the MinAtar paper's settings,
conf/tuned/dqn_minatar.yaml; the MinAtar CNN as SB3's features extractor and its dense layers as
SB3's net_arch) on this project's MinAtar env, and tfrl's DQN as train.py builds it from that config.

Compared per update: the loss, and the change of the online network's weights by the update
(|tfrl's change - SB3's| / |SB3's|); beside each, SB3's own update of the batch's rows in another
order: the floor that the order of a sum alone sets. Exits 1 where a difference exceeds `--tolerance`.
"""
from __future__ import annotations

import argparse
import copy
import os
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks.update_check import (SB3_MISSING, reference_data, changes, keras_weights, layer_pairs, prefixed, relative,  # noqa: E402
                                     report, set_state, sub, torch_state)

MODULES = ("q_net", "q_net_target")
# SB3's module of each of tfrl's layers (conv_net's names after the model's): NatureCNN, then the Q head
LAYERS = {"conv0": "features_extractor.cnn.0", "conv1": "features_extractor.cnn.2",
          "conv2": "features_extractor.cnn.4", "h0": "features_extractor.linear.0", "out": "q_net.0"}
# on MinAtar: sb3_learning.py's features extractor (the convolution), then net_arch's dense layers
MINATAR_LAYERS = {"conv0": "features_extractor.net.0", "h0": "q_net.0", "out": "q_net.2"}
MINATAR = "MinAtar/"
SETTINGS = {"learning_rate": 1e-4, "batch_size": 32, "train_freq": 4, "gradient_steps": 1, "gamma": 0.99,
            "max_grad_norm": 10.0, "target_update_interval": 1000}  # the RL Zoo's, as conf/tuned/dqn_atari.yaml


# --- SB3's side (SB3's venv: torch, no TensorFlow) ------------------------------------------------
def sb3_state(model) -> dict[str, np.ndarray]:
    return torch_state(model.policy, MODULES, {"q_net": "optimizer"})


def sb3_updates(model, data: dict, batches: int, order: np.ndarray, reset_to: list | None = None) -> tuple[dict, list]:
    """SB3's `train()` on each batch in turn, its rows in `order`: per update the loss and the
    state after it, and the saved state; after update k, SB3 is reset to `reset_to[k]` if given."""
    import torch
    from stable_baselines3.common.type_aliases import ReplayBufferSamples

    recorded, out, saved = {}, {}, []
    model.logger.record = lambda key, value, exclude=None: recorded.__setitem__(key, value)
    for k in range(batches):
        def column(key, dtype=torch.float32):
            return torch.as_tensor(data[f"{k}/{key}"][order]).to(dtype)

        sample = ReplayBufferSamples(column("obs", torch.uint8), column("action", torch.int64)[:, None],
                                     column("next_obs", torch.uint8), column("done")[:, None],
                                     column("reward")[:, None], None)
        model.replay_buffer = type("OneBatch", (), {"sample": lambda self, *a, s=sample, **kw: s})()
        model.train(gradient_steps=1, batch_size=len(order))
        out[f"{k}/loss"] = np.float64(recorded["train/loss"])
        out.update(prefixed(str(k), sb3_state(model)))
        saved.append(copy.deepcopy((model.policy.state_dict(), model.policy.optimizer.state_dict())))
        if reset_to:
            restore(model, reset_to[k])
    return out, saved


def restore(model, saved) -> None:
    weights, optimizer = copy.deepcopy(saved)
    model.policy.load_state_dict(weights)
    model.policy.optimizer.load_state_dict(optimizer)


def minatar_config(env_id: str, learning_starts: int, seed: int, name: str = "config", extra: tuple = ()):
    """The composed config of `agent=dqn env=minatar` on `env_id`'s game (MinAtar/<game>)."""
    from training.config import compose_config

    return compose_config(["agent=dqn", "env=minatar", f"env.game={env_id[len(MINATAR):]}",
                           f"learning_starts={learning_starts}", f"seed={seed}", *extra], name)


def sb3_model(env_id: str, steps: int, learning_starts: int, seed: int):
    """SB3's DQN on Atari with the RL Zoo's settings, or on MinAtar as the minatar_dqn study runs it."""
    if env_id.startswith(MINATAR):
        from benchmarks.sb3_learning import build_model, make_env, sb3_settings

        cfg = minatar_config(env_id, learning_starts, seed, "sb3_learning")
        agent, kwargs = sb3_settings(cfg)
        return build_model(cfg, agent, {**kwargs, "verbose": 0}, make_env(cfg))
    import ale_py
    import gymnasium as gym
    from stable_baselines3 import DQN
    from stable_baselines3.common.env_util import make_atari_env
    from stable_baselines3.common.vec_env import VecFrameStack

    gym.register_envs(ale_py)
    env = VecFrameStack(make_atari_env(env_id, n_envs=1, seed=seed), n_stack=4)
    return DQN("CnnPolicy", env, buffer_size=steps, learning_starts=learning_starts, seed=seed, device="cpu",
               verbose=0, **SETTINGS)


def sb3_side(out: str, env_id: str, steps: int, learning_starts: int, batches: int, seed: int) -> None:
    import torch
    from stable_baselines3.common.logger import configure

    torch.set_num_threads(1)
    model = sb3_model(env_id, steps, learning_starts, seed)
    model.learn(steps)
    model.set_logger(configure(None, []))
    replay, rng = model.replay_buffer, np.random.default_rng(seed)
    size = replay.buffer_size if replay.full else replay.pos
    data = {"gamma": np.float32(model.gamma), "lr": np.float32(model.learning_rate),
            "updates": np.int64(model._n_updates), "batches": np.int64(batches),
            "actions": np.int64(model.action_space.n),
            # SB3 stores and hands over (C, H, W) frames, but for a square MinAtar game (Seaquest's
            # 10 x 10 x 10) it takes C for H and keeps (H, W, C), which the extractor permutes itself
            "channels_first": np.bool_(getattr(model.q_net.features_extractor, "transposed", True))}
    data.update(prefixed("start", sb3_state(model)))
    batch_size = int(model.batch_size)
    for k in range(batches):
        i = rng.integers(size, size=batch_size)
        data.update({f"{k}/obs": replay.observations[i, 0], f"{k}/action": replay.actions[i, 0, 0].astype(np.int64),
                     f"{k}/reward": replay.rewards[i, 0].astype(np.float32),
                     f"{k}/next_obs": replay.next_observations[i, 0],
                     f"{k}/done": (replay.dones[i, 0] * (1 - replay.timeouts[i, 0])).astype(np.float32)})
    start = copy.deepcopy((model.policy.state_dict(), model.policy.optimizer.state_dict()))
    results, saved = sb3_updates(model, data, batches, np.arange(batch_size))
    data.update(prefixed("sb3", results))
    restore(model, start)  # the floor: the same updates from the same states, the rows reordered
    data.update(prefixed("reordered", sb3_updates(model, data, batches, rng.permutation(batch_size), saved)[0]))
    np.savez(out, **data)


# --- tfrl's side ----------------------------------------------------------------------------------
def tfrl_agent(env_id: str, frame_shape: tuple, actions: int, lr: float):
    """tfrl's DQN as the check compares it: on MinAtar as train.py builds it from the study's config
    (its target never copied within the check), on Atari the plain DQN of the RL Zoo's settings."""
    import functools

    import gymnasium as gym

    from agents.dqn import DQN
    from networks.cnn import conv_net
    from training.builder import build_agent

    if env_id.startswith(MINATAR):
        cfg = minatar_config(env_id, 0, 0, extra=("agent.target_update_every=1000000000",))
        agent = build_agent(cfg, gym.spaces.Box(0, 255, frame_shape, np.uint8), gym.spaces.Discrete(actions),
                            np.random.default_rng(0))
        if abs(float(cfg.agent.lr) - lr) > 1e-6 * lr:  # SB3's side writes it as float32
            sys.exit(f"the configs disagree: tfrl's lr {cfg.agent.lr}, SB3's {lr}")
        return agent, MINATAR_LAYERS
    return DQN(frame_shape, actions, functools.partial(conv_net, init="torch"), np.random.default_rng(0),
               lr=lr, double=False, target_update_every=10**9, max_grad_norm=SETTINGS["max_grad_norm"]), LAYERS


def tfrl_side(data: dict, batches: int, env_id: str) -> tuple[list[dict], list[dict]]:
    import tensorflow as tf

    from buffers.types import Batch

    def frames(x):  # SB3's (C, H, W) frames as tfrl's (H, W, C)
        return np.moveaxis(x, 1, -1) if data.get("channels_first", True) else x

    actions = int(data["actions"]) if "actions" in data else len(data["start/q_net/q_net.0.bias"])  # older outputs
    agent, layers = tfrl_agent(env_id, frames(data["0/obs"]).shape[1:], actions, float(data["lr"]))
    targets = [(layer_pairs(agent.q, layers), "q_net", agent.optimizer),
               (layer_pairs(agent.q_target, layers), "q_net_target", None)]
    ours, floor = [], []
    for k in range(batches):
        before = sub(data, "start" if k == 0 else f"sb3/{k - 1}")
        set_state(before, targets)
        reward = data[f"{k}/reward"]
        batch = Batch(frames(data[f"{k}/obs"]), data[f"{k}/action"].astype(np.int32), reward,
                      frames(data[f"{k}/next_obs"]), float(data["gamma"]) * (1.0 - data[f"{k}/done"]),
                      np.ones_like(reward))
        loss = agent.update(Batch(*(tf.constant(x) for x in batch)))["loss"]
        theirs, reordered = sub(data, f"sb3/{k}"), sub(data, f"reordered/{k}")
        ours.append({"loss": relative(loss.numpy(), theirs["loss"]),
                     **changes(keras_weights(targets[:1]), theirs, before, ["q_net"])})
        floor.append({"loss": relative(reordered["loss"], theirs["loss"]), **changes(reordered, theirs, before, ["q_net"])})
    return ours, floor


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", default="BreakoutNoFrameskip-v4",
                        help="an Atari game as SB3's AtariWrapper takes it, or MinAtar/<game> (breakout, space_invaders, ...)")
    parser.add_argument("--steps", type=int, default=2500,
                        help="env steps of SB3's training before the check (the target copied at step 2000, 125 updates before)")
    parser.add_argument("--learning-starts", type=int, default=1000)
    parser.add_argument("--batches", type=int, default=3, help="updates to compare, each on its own minibatch")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tolerance", type=float, default=1e-3, help="the largest relative difference that passes")
    parser.add_argument("--sb3-data", metavar="NPZ",
                        help="keep SB3's side's output here, or read it from here if it exists (tfrl's side again)")
    parser.add_argument("--sb3-side", nargs=1, metavar="OUT", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.sb3_side:
        sb3_side(args.sb3_side[0], args.env, args.steps, args.learning_starts, args.batches, args.seed)
        return
    data = reference_data(__file__, args.sb3_data, True, SB3_MISSING,
                          ["--env", args.env, "--steps", str(args.steps), "--learning-starts", str(args.learning_starts),
                           "--batches", str(args.batches), "--seed", str(args.seed)], flag="--sb3-side")
    ours, floor = tfrl_side(data, int(data["batches"]), args.env)
    sys.exit(report(f"{args.env}, SB3's DQN after {int(data['updates'])} updates; relative difference to SB3's update: "
                    f"tfrl's | SB3's own with the rows reordered", ours, floor, args.tolerance))


if __name__ == "__main__":
    main()
