"""Check that tfrl's SAC carries its state from one update to the next as Stable-Baselines3's
`SAC.train()` does: from one SB3 state, N consecutive updates on each side on the same minibatches
and with the same Gaussian noise, each side going on from its OWN state after the update before
(weights, targets, temperature, Adam's moments and step count), and how far apart they end up.

    bash benchmarks/setup_sb3.sh                                # once
    uv run python benchmarks/sb3_sac_chained_check.py           # 200 updates from SB3's SAC on walker-walk
    uv run python benchmarks/sb3_sac_chained_check.py --exact-tanh --updates 50

benchmarks/sb3_sac_update_check.py sets tfrl to SB3's state before every update, so what an update
leaves for the next (Adam's step count and moments, the targets' Polyak step, the temperature the
next update uses) is never compared there. Here it is, and nothing else is reset.

This process is tfrl's side; it runs SB3's side in SB3's venv (this file, `--sb3-side`): SB3's SAC
(its MuJoCo defaults) after 1000 random steps and 500 updates on walker-walk writes its state,
`--updates` minibatches drawn from its replay buffer (terminated only where the episode did not end
on its time limit), the noise of each update's two policy samples, and, after each update, the
temperature it used, its critic loss and, at the reported updates, its weights; then the same
updates again from the same start with each batch's rows (and their noise) reordered. tfrl's SAC
(agent=sac, network=mlp [256, 256], log_std=clip) is set to the start once, as in
sb3_sac_update_check.py, and runs the N updates eagerly.

The table: after updates 1, 2, 10, 50, 100, 200 (those up to N, and N), per network, the relative
difference of its weights' change since the start, |tfrl's change - SB3's| / |SB3's|, beside the
same for SB3's own chain with the rows reordered: the floor float32 rounding sets. The two
frameworks' kernels round further apart than the reordering does, so early on tfrl's stands a few
times above the floor, below 1e-4. Training is chaotic: a difference the size of rounding can tip one
update, and from there both jump by orders of magnitude together; what matters is that tfrl's
stays with the floor. Below it, the largest relative difference over the updates of the temperature each update
used and of its critic loss, tfrl's and the reordered chain's.
- Both sides' log density of the squashed action adds 1e-6 inside log(1 - tanh(u)^2) (SB3's,
  tfrl's `agent.tanh_epsilon` default); `--exact-tanh` takes the exact form on both (SB3's
  patched, tfrl's `tanh_epsilon=0`).
A wrong update (see sb3_sac_update_check.py) is far off from update 1 on. A wrong carry is far off
by update 2: a Polyak step of another tau shows in the targets' change at update 1 and in the
critics' from update 2; Adam's moments not carried, its step count not advanced or the temperature's
step lost leave update 1 at the floor and put the networks they touch hundreds of times above it
from update 2 on. Exits 1 unless each of tfrl's differences is at most `--tolerance` times the
floor, or below 1e-4.
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks.sb3_sac_update_check import (  # noqa: E402
    batch_of, exact_squash_log_prob, feed, flat, keras_layout, restore, save, set_state, start_and_batches,
    tfrl_sac, train_on, unflat)
from benchmarks.update_check import SB3_MISSING, reference_data, relative  # noqa: E402

NETWORKS = ("actor", "critic1", "critic2", "critic1_target", "critic2_target", "log_alpha")
REPORTED = (1, 2, 10, 50, 100, 200)
BATCH_SIZE = 256
ROUNDING = 1e-4  # the frameworks' kernels round apart by up to this where the reordered floor is far below it


def reported(updates: int) -> list[int]:
    return sorted({k for k in REPORTED if k <= updates} | {updates})


# --- SB3's side (SB3's venv: torch, no TensorFlow) ------------------------------------------------
def sb3_chain(model, data: dict, updates: int, order: np.ndarray) -> dict[str, np.ndarray]:
    """SB3's `train()` on each batch in turn, its rows in `order`, going on from its own state: per
    update the temperature it used and its critic loss, and its weights after the reported ones."""
    recorded, out = feed(model, data, updates, order), {}
    keep = reported(updates)
    for k in range(updates):
        train_on(model, data, k, order)
        out[f"alpha/{k}"] = np.float64(recorded["train/ent_coef"])
        out[f"critic_loss/{k}"] = np.float64(recorded["train/critic_loss"])
        if k + 1 in keep:
            out.update(flat(f"{k + 1}/weights", keras_layout(model, lambda p: p.detach().numpy())))
    return out


def sb3_side(out: str, updates: int, seed: int, exact_tanh: bool) -> None:
    import gymnasium as gym
    import torch
    from stable_baselines3 import SAC
    from stable_baselines3.common.logger import configure

    import envs  # noqa: F401 (registers DMC-v1)

    torch.set_num_threads(1)
    env = gym.make("DMC-v1", domain="walker", task="walk", max_episode_steps=1000)
    model = SAC("MlpPolicy", env, learning_starts=1000, seed=seed, device="cpu", verbose=0)
    model.learn(1500)
    model.set_logger(configure(None, []))
    if exact_tanh:
        exact_squash_log_prob()
    replay = model.replay_buffer
    rng = np.random.default_rng(seed)
    data = start_and_batches(model, replay, updates, BATCH_SIZE, rng)
    start = save(model)
    chain = sb3_chain(model, data, updates, np.arange(BATCH_SIZE))
    restore(model, start)
    reordered = sb3_chain(model, data, updates, rng.permutation(BATCH_SIZE))
    data.update({f"sb3/{key}": value for key, value in chain.items()})
    data.update({f"sb3_reordered/{key}": value for key, value in reordered.items()})
    np.savez(out, **data)


# --- tfrl's side ----------------------------------------------------------------------------------
def tfrl_side(data: dict, updates: int, exact_tanh: bool) -> tuple[dict, dict, np.ndarray, np.ndarray]:
    """tfrl's SAC set to SB3's start once, then the N updates: per reported update and network its
    weight change's difference to SB3's, and the reordered chain's; per update the temperature and
    the critic loss tfrl's update reported."""
    agent = tfrl_sac(data, updates, exact_tanh)
    set_state(agent, data, "start")  # once: from here on tfrl carries its own state
    before = unflat(data, "start/weights")

    def change(weights, net):
        return np.concatenate([(w - b).ravel() for w, b in zip(weights[net], before[net], strict=True)])

    ours, floor, alpha, critic_loss = {}, {}, [], []
    keep = reported(updates)
    for k in range(updates):
        out = agent.update(batch_of(data, k))
        alpha.append(float(out["alpha"]))
        critic_loss.append(float(out["critic_loss"]))
        if k + 1 in keep:
            weights = {net: getattr(agent, net).get_weights() for net in NETWORKS if net != "log_alpha"}
            weights["log_alpha"] = [agent.log_alpha.numpy()]
            theirs, reordered = unflat(data, f"sb3/{k + 1}/weights"), unflat(data, f"sb3_reordered/{k + 1}/weights")
            for net in NETWORKS:
                ours[k + 1, net] = relative(change(weights, net), change(theirs, net))
                floor[k + 1, net] = relative(change(reordered, net), change(theirs, net))
    return ours, floor, np.array(alpha), np.array(critic_loss)


def largest(values: np.ndarray, data: dict, key: str, updates: int) -> float:
    """The largest relative difference over the updates of `values` to SB3's `key`."""
    theirs = np.array([data[f"sb3/{key}/{k}"] for k in range(updates)])
    return float(np.max(np.abs(values - theirs) / np.abs(theirs)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--updates", type=int, default=200, help="consecutive updates, each on its own minibatch")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--exact-tanh", action="store_true",
                        help="both sides without the 1e-6 in the squashed log density (see above)")
    parser.add_argument("--tolerance", type=float, default=3.0,
                        help=f"how many times the reordered floor tfrl's difference may be (any below {ROUNDING:g} passes)")
    parser.add_argument("--sb3-side", nargs=1, metavar="OUT", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.updates < 1:
        parser.error("--updates at least 1")
    if args.sb3_side:
        sb3_side(args.sb3_side[0], args.updates, args.seed, args.exact_tanh)
        return
    arguments = ["--updates", str(args.updates), "--seed", str(args.seed)] + ["--exact-tanh"] * args.exact_tanh
    data = reference_data(__file__, None, True, SB3_MISSING, arguments, flag="--sb3-side")
    ours, floor, alpha, critic_loss = tfrl_side(data, args.updates, args.exact_tanh)

    tanh = "exact log(1 - tanh(u)^2)" if args.exact_tanh else "log(1 - a^2 + 1e-6)"
    print(f"{args.updates} chained updates from SB3's SAC on walker-walk (seed {args.seed}), each side carrying "
          f"its own state; tanh correction on both sides: {tanh}")
    print(f"{'after update':>12} | {'network':<15} | weight change, relative difference to SB3's: tfrl's | SB3's rows reordered")
    failed = []
    for (k, net), difference in ours.items():
        passes = difference <= args.tolerance * floor[k, net] or difference < ROUNDING
        failed += [] if passes else [f"{net} after {k}"]
        print(f"{k:>12} | {net:<15} | {difference:9.2e} | {floor[k, net]:9.2e}{'' if passes else '  <-- over'}")
    for name, values, key in (("the temperature each update used", alpha, "alpha"),
                              ("each update's critic loss", critic_loss, "critic_loss")):
        reordered = np.array([data[f"sb3_reordered/{key}/{k}"] for k in range(args.updates)])
        print(f"{name}, largest relative difference to SB3's: tfrl's {largest(values, data, key, args.updates):.2e}"
              f" | SB3's rows reordered {largest(reordered, data, key, args.updates):.2e}")
    if failed:
        print(f"NOT the same: above {args.tolerance:g}x the floor and {ROUNDING:g}: {', '.join(failed)}")
        sys.exit(1)
    print(f"the same: every difference within {args.tolerance:g}x the floor or below {ROUNDING:g}")


if __name__ == "__main__":
    main()
