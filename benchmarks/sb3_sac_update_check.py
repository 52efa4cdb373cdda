"""Check that tfrl's SAC update computes what Stable-Baselines3's `SAC.train()` computes: from the
same state (weights, temperature and Adam's moments), on the same minibatches and with the same
Gaussian noise, a few updates on each side, their losses and weight changes compared.

    bash benchmarks/setup_sb3.sh                                # once
    uv run python benchmarks/sb3_sac_update_check.py            # SB3's SAC after 2000 updates on walker-walk
    uv run python benchmarks/sb3_sac_update_check.py --checkpoint RUN/sb3_checkpoint   # a trained SB3 run's

This process is tfrl's side; it runs SB3's side in SB3's venv (this file, `--sb3-side`), which
writes the starting state, `--batches` minibatches drawn from SB3's replay buffer (terminated only
where the episode did not end on its time limit), the standard-normal noise of each update's two
policy samples, and SB3's losses and state after each update. tfrl's SAC (agent=sac, network=mlp
[256, 256], log_std=clip) is set to the same state, the actor's two output layers (SB3's mu and
log_std) as the halves of its one, and runs its update eagerly with the same noise. Each update
starts from SB3's state after the one before, so differences do not add up.

Compared per update: the critic, actor and temperature losses, log alpha after the step, and per
network the change of its weights by the update (|tfrl's change - SB3's| / |SB3's|). Beside each,
the same difference for SB3's own update of the batch's rows in another order: the floor that
float32 rounding sets; the two frameworks' kernels round more differently than that, to about 1e-4.
- Both sides' log density of the squashed action adds 1e-6 inside log(1 - tanh(u)^2) (SB3's,
  tfrl's `agent.tanh_epsilon` default); `--exact-tanh` takes the exact log(1 - tanh(u)^2) on both
  (SB3's patched, tfrl's `tanh_epsilon=0`). With one side exact and the other not, the
  temperature's loss, -log alpha * (log pi + target entropy), a small difference of large terms,
  differed by up to 6e-3 on a trained walker-walk run, where actions saturate.
- Both sides go on with SB3's Adam state unless `--fresh-adam`. Adam's first step moves each
  weight by about lr * sign(g), so the weights whose gradients are near epsilon move by what
  rounding makes of g: the first update's changes differ by up to 3e-3, the next ones' by 1e-4.
A difference in the maths of the update (the actor's loss on the critics before their step, the
entropy term left out of the target, the online critics in it) shows as 1e-1 or more. Exits 1
where a difference exceeds `--tolerance`.
"""
from __future__ import annotations

import argparse
import copy
import os
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks.update_check import SB3_MISSING, Queued, prefixed, reference_data, relative, report  # noqa: E402

NETWORKS = ("actor", "critic1", "critic2", "critic1_target", "critic2_target")
OPTIMIZERS = {"actor": ("actor",), "critic": ("critic1", "critic2"), "alpha": ("log_alpha",)}
LOSSES = {"critic_loss": "critic_loss", "actor_loss": "actor_loss", "alpha_loss": "ent_coef_loss"}


# --- SB3's side (SB3's venv: torch, no TensorFlow) ------------------------------------------------
def keras_layout(model, get) -> dict[str, list[np.ndarray]]:
    """`get(parameter)` for each of SB3's parameters (the weights, or one of Adam's moments), per
    tfrl network in its variables' order and layout: kernels (in, out); the actor's last layer is
    mu and log_std side by side, as tfrl's actor outputs both from one layer."""
    import torch

    def linears(module):
        layers = [m for m in module.modules() if isinstance(m, torch.nn.Linear)]
        return [x for m in layers for x in (get(m.weight).T.copy(), get(m.bias).copy())]

    actor, mu, log_std = linears(model.actor.latent_pi), linears(model.actor.mu), linears(model.actor.log_std)
    actor += [np.concatenate([mu[0], log_std[0]], axis=1), np.concatenate([mu[1], log_std[1]])]
    return {"actor": actor, "critic1": linears(model.critic.qf0), "critic2": linears(model.critic.qf1),
            "critic1_target": linears(model.critic_target.qf0), "critic2_target": linears(model.critic_target.qf1),
            "log_alpha": [get(model.log_ent_coef).reshape(()).copy()]}


def sb3_state(model) -> dict[str, np.ndarray]:
    """SB3's weights, log alpha and Adam's state, flat, in tfrl's layout."""
    state = flat("weights", keras_layout(model, lambda p: p.detach().numpy()))
    for name, optimizer in (("actor", model.actor.optimizer), ("critic", model.critic.optimizer),
                            ("alpha", model.ent_coef_optimizer)):
        first = optimizer.param_groups[0]["params"][0]
        if first not in optimizer.state:  # fresh: no step taken
            state[f"adam/{name}/step"] = np.float32(0)
            continue
        state[f"adam/{name}/step"] = np.float32(optimizer.state[first]["step"])
        for moment in ("exp_avg", "exp_avg_sq"):
            layout = keras_layout(model, lambda p: optimizer.state[p][moment].numpy() if p in optimizer.state else p.detach().numpy())
            state.update(flat(f"adam/{name}/{moment}", {net: layout[net] for net in OPTIMIZERS[name]}))
    return state


def flat(prefix: str, tensors: dict[str, list[np.ndarray]]) -> dict[str, np.ndarray]:
    return {f"{prefix}/{net}/{i}": w for net, ws in tensors.items() for i, w in enumerate(ws)}


def feed(model, data: dict, batches: int, order: np.ndarray) -> dict:
    """Make SB3's SAC draw its policy samples from the recorded noise (two an update, for `batches`
    updates, rows in `order`) and log into the dict returned."""
    import torch

    noise = [torch.as_tensor(data[f"noise/{k}/{j}"][order]) for k in range(batches) for j in range(2)]
    torch.distributions.Normal.rsample = lambda dist, sample_shape=torch.Size(): dist.loc + dist.scale * noise.pop(0)
    recorded = {}
    model.logger.record = lambda key, value, exclude=None: recorded.__setitem__(key, value)
    return recorded


def train_on(model, data: dict, k: int, order: np.ndarray) -> None:
    """One SB3 `train()` step on minibatch k of the data, its rows in `order`."""
    import torch
    from stable_baselines3.common.type_aliases import ReplayBufferSamples

    def column(key):
        return torch.as_tensor(data[f"{key}/{k}"][order])

    sample = ReplayBufferSamples(column("obs"), column("action"), column("next_obs"), column("done")[:, None],
                                 column("reward")[:, None], None)
    model.replay_buffer = type("OneBatch", (), {"sample": lambda self, *a, s=sample, **kw: s})()
    model.train(gradient_steps=1, batch_size=len(order))


def sb3_updates(model, data: dict, batches: int, order: np.ndarray, reset_to: list | None = None) -> tuple[dict, list]:
    """SB3's `train()` on each of the batches in turn, its rows in `order`, each update's two policy
    samples drawn from the given noise: per update its losses and its state after it, and SB3's own
    saved state (to restore); after update k, SB3 is reset to `reset_to[k]` if given."""
    recorded, out, saved = feed(model, data, batches, order), {}, []
    for k in range(batches):
        train_on(model, data, k, order)
        out.update({f"{k}/loss/{key}": np.float64(recorded[f"train/{sb3_key}"]) for key, sb3_key in LOSSES.items()})
        out.update(prefixed(str(k), sb3_state(model)))
        saved.append(save(model))
        if reset_to:
            restore(model, reset_to[k])
    return out, saved


def save(model):
    return copy.deepcopy((model.policy.state_dict(), model.log_ent_coef.detach().clone(),
                          [o.state_dict() for o in (model.actor.optimizer, model.critic.optimizer, model.ent_coef_optimizer)]))


def restore(model, saved) -> None:
    import torch

    weights, log_alpha, optimizers = copy.deepcopy(saved)
    model.policy.load_state_dict(weights)
    with torch.no_grad():
        model.log_ent_coef.copy_(log_alpha)
    for o, state in zip((model.actor.optimizer, model.critic.optimizer, model.ent_coef_optimizer), optimizers):
        o.load_state_dict(state)


def exact_squash_log_prob() -> None:
    """SB3's log density of the squashed action with log(1 - tanh(u)^2) exact, as tfrl's with
    tanh_epsilon=0, where SB3 adds 1e-6 inside the log."""
    import math

    import torch
    from stable_baselines3.common.distributions import DiagGaussianDistribution, SquashedDiagGaussianDistribution

    def log_prob(dist, actions, gaussian_actions=None):
        u = gaussian_actions
        log_det = 2.0 * (math.log(2.0) - u - torch.nn.functional.softplus(-2.0 * u))
        return DiagGaussianDistribution.log_prob(dist, u) - torch.sum(log_det, dim=1)

    SquashedDiagGaussianDistribution.log_prob = log_prob


def start_and_batches(model, replay, batches: int, batch_size: int, rng: np.random.Generator) -> dict:
    """SB3's settings and state, and `batches` minibatches drawn from its replay (terminated only
    where the episode did not end on its time limit), each with the noise of its two policy samples."""
    size = replay.buffer_size if replay.full else replay.pos
    data = {"target_entropy": np.float32(model.target_entropy), "gamma": np.float32(model.gamma),
            "tau": np.float32(model.tau), "lr": np.float32(model.lr_schedule(1))}
    data.update(prefixed("start", sb3_state(model)))
    action_dim = model.action_space.shape[0]
    for k in range(batches):
        i = rng.integers(size, size=batch_size)
        data[f"obs/{k}"] = replay.observations[i, 0].astype(np.float32)
        data[f"action/{k}"] = replay.actions[i, 0].astype(np.float32)
        data[f"reward/{k}"] = replay.rewards[i, 0].astype(np.float32)
        data[f"next_obs/{k}"] = replay.next_observations[i, 0].astype(np.float32)
        data[f"done/{k}"] = (replay.dones[i, 0] * (1 - replay.timeouts[i, 0])).astype(np.float32)
        for j in range(2):  # the policy's sample on obs, then on next_obs: SB3's order, and tfrl's
            data[f"noise/{k}/{j}"] = rng.standard_normal((batch_size, action_dim)).astype(np.float32)
    return data


def sb3_side(out: str, checkpoint: str | None, batches: int, batch_size: int, seed: int, fresh_adam: bool,
             exact_tanh: bool) -> None:
    import pickle

    import gymnasium as gym
    import torch
    from stable_baselines3 import SAC
    from stable_baselines3.common.logger import configure

    import envs  # noqa: F401 (registers DMC-v1)

    torch.set_num_threads(1)
    if checkpoint:
        model = SAC.load(os.path.join(checkpoint, "model.zip"), device="cpu")
        with open(os.path.join(checkpoint, "replay.pkl"), "rb") as f:
            replay = pickle.load(f)
    else:  # SB3's SAC (its MuJoCo defaults) after 1000 random steps and 2000 updates on walker-walk
        env = gym.make("DMC-v1", domain="walker", task="walk", max_episode_steps=1000)
        model = SAC("MlpPolicy", env, learning_starts=1000, seed=seed, device="cpu", verbose=0)
        model.learn(3000)
        replay = model.replay_buffer
    model.set_logger(configure(None, []))
    if exact_tanh:
        exact_squash_log_prob()
    if fresh_adam:
        model.actor.optimizer = torch.optim.Adam(model.actor.parameters(), lr=model.lr_schedule(1))
        model.critic.optimizer = torch.optim.Adam(model.critic.parameters(), lr=model.lr_schedule(1))
        model.ent_coef_optimizer = torch.optim.Adam([model.log_ent_coef], lr=model.lr_schedule(1))
    rng = np.random.default_rng(seed)
    data = start_and_batches(model, replay, batches, batch_size, rng)
    start = save(model)
    results, states = sb3_updates(model, data, batches, np.arange(batch_size))
    data.update(prefixed("sb3", results))
    restore(model, start)  # the rounding floor: the same updates from the same states, rows reordered
    data.update(prefixed("sb3_reordered", sb3_updates(model, data, batches, rng.permutation(batch_size), states)[0]))
    np.savez(out, **data)


# --- tfrl's side ----------------------------------------------------------------------------------
def unflat(data: dict, prefix: str) -> dict[str, list[np.ndarray]]:
    """The inverse of `flat`: {net: [tensors in order]} of the keys under `prefix`."""
    nets: dict[str, dict[int, np.ndarray]] = {}
    for key, value in data.items():
        if key.startswith(prefix + "/"):
            net, i = key[len(prefix) + 1:].rsplit("/", 1)
            nets.setdefault(net, {})[int(i)] = value
    return {net: [tensors[i] for i in sorted(tensors)] for net, tensors in nets.items()}


def set_state(agent, data: dict, prefix: str) -> None:
    """tfrl's SAC set to the weights, log alpha and Adam state that SB3's side wrote under `prefix`."""
    for net, weights in unflat(data, f"{prefix}/weights").items():
        if net == "log_alpha":
            agent.log_alpha.assign(weights[0])
        else:
            getattr(agent, net).set_weights(weights)
    for name, optimizer in (("actor", agent.actor_optimizer), ("critic", agent.critic_optimizer),
                            ("alpha", agent.alpha_optimizer)):
        step = int(data[f"{prefix}/adam/{name}/step"])
        optimizer.iterations.assign(step)
        for moment, slots in (("exp_avg", optimizer._momentums), ("exp_avg_sq", optimizer._velocities)):
            values = [x for net in OPTIMIZERS[name] for x in unflat(data, f"{prefix}/adam/{name}/{moment}").get(net, [])]
            for slot, value in zip(slots, values or [np.zeros(s.shape, np.float32) for s in slots], strict=True):
                slot.assign(np.reshape(value, slot.shape))


def differences(data: dict, k: int, side: str, start: str) -> dict[str, float]:
    """Update k's losses, log alpha and weight changes on `side` against SB3's, relative."""
    row = {key: relative(data[f"{side}/{k}/loss/{key}"], data[f"sb3/{k}/loss/{key}"]) for key in LOSSES}
    before, theirs, ours = (unflat(data, f"{p}/weights") for p in (start, f"sb3/{k}", f"{side}/{k}"))
    row["log_alpha"] = relative(ours["log_alpha"][0], theirs["log_alpha"][0])
    for net in NETWORKS:
        def change(weights):
            return np.concatenate([(w - b).ravel() for w, b in zip(weights[net], before[net], strict=True)])

        row[f"{net} change"] = relative(change(ours), change(theirs))
    return row


def tfrl_sac(data: dict, updates: int, exact_tanh: bool):
    """tfrl's SAC with SB3's settings of the data (256-256, SB3's clamp of the log std, SB3's 1e-6 or,
    with `exact_tanh`, none), its policy samples drawn from the data's noise for `updates` updates."""
    import functools

    import tensorflow as tf

    from agents.losses import TANH_EPSILON
    from agents.sac import SAC
    from networks.mlp import mlp

    obs_dim, action_dim = data["obs/0"].shape[1], data["action/0"].shape[1]
    lr = float(data["lr"])
    agent = SAC(obs_dim, -np.ones(action_dim, np.float32), np.ones(action_dim, np.float32),
                functools.partial(mlp, hidden=[256, 256]), np.random.default_rng(0), actor_lr=lr, critic_lr=lr,
                alpha_lr=lr, tau=float(data["tau"]), target_entropy=float(data["target_entropy"]), log_std="clip",
                tanh_epsilon=0.0 if exact_tanh else TANH_EPSILON)
    agent._tf_rng = Queued([tf.constant(data[f"noise/{k}/{j}"]) for k in range(updates) for j in range(2)])
    return agent


def batch_of(data: dict, k: int):
    """Minibatch k of the data as tfrl's Batch of tensors (discount = gamma * (1 - terminated))."""
    import tensorflow as tf

    from buffers.types import Batch

    batch = Batch(data[f"obs/{k}"], data[f"action/{k}"], data[f"reward/{k}"], data[f"next_obs/{k}"],
                  float(data["gamma"]) * (1.0 - data[f"done/{k}"]), np.ones_like(data[f"reward/{k}"]))
    return Batch(*(tf.constant(np.asarray(x, np.float32)) for x in batch))


def tfrl_side(data: dict, batches: int, exact_tanh: bool) -> tuple[list[dict[str, float]], list[dict[str, float]]]:
    """tfrl's SAC run from each of SB3's states in turn: per update, each quantity's difference
    to SB3's, and the same for SB3's own update of the rows reordered."""
    agent = tfrl_sac(data, batches, exact_tanh)
    ours, floor = [], []
    for k in range(batches):
        start = "start" if k == 0 else f"sb3/{k - 1}"
        set_state(agent, data, start)
        out = agent.update(batch_of(data, k))
        data.update({f"tfrl/{k}/loss/{key}": out[key].numpy() for key in LOSSES})
        weights = {net: getattr(agent, net).get_weights() for net in NETWORKS} | {"log_alpha": [agent.log_alpha.numpy()]}
        data.update(flat(f"tfrl/{k}/weights", weights))
        ours.append(differences(data, k, "tfrl", start))
        floor.append(differences(data, k, "sb3_reordered", start))
    return ours, floor


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint", help="an SB3 run's sb3_checkpoint directory (benchmarks/sb3_learning.py)")
    parser.add_argument("--batches", type=int, default=3, help="updates to compare, each on its own minibatch")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--fresh-adam", action="store_true", help="start Adam anew on both sides (see above)")
    parser.add_argument("--exact-tanh", action="store_true",
                        help="both sides without the 1e-6 in the squashed log density (see above)")
    parser.add_argument("--tolerance", type=float, default=1e-3, help="the largest relative difference that passes")
    parser.add_argument("--sb3-side", nargs=1, metavar="OUT", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.sb3_side:
        sb3_side(args.sb3_side[0], args.checkpoint, args.batches, args.batch_size, args.seed, args.fresh_adam,
                 args.exact_tanh)
        return
    arguments = ["--batches", str(args.batches), "--batch-size", str(args.batch_size), "--seed", str(args.seed)]
    arguments += ["--checkpoint", args.checkpoint] if args.checkpoint else []
    arguments += [flag for flag, on in (("--fresh-adam", args.fresh_adam), ("--exact-tanh", args.exact_tanh)) if on]
    data = reference_data(__file__, None, True, SB3_MISSING, arguments, flag="--sb3-side")
    ours, floor = tfrl_side(data, args.batches, args.exact_tanh)
    sys.exit(report("relative difference to SB3's update: tfrl's | SB3's own with the batch's rows reordered",
                    ours, floor, args.tolerance))

if __name__ == "__main__":
    main()
