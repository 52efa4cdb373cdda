"""Stable-Baselines3's TD3 or DDPG, trained with the settings of the train.py run that the same
overrides compose, and written as a run directory that aggregate.py reads: the reference check of
tfrl's learning. Runs in SB3's venv (`bash benchmarks/setup_sb3.sh`):

    benchmarks/.venv-sb3/bin/python benchmarks/sb3_learning.py agent=td3 env=hopper seed=0 total_steps=120000
    uv run python train.py agent=td3 env=hopper seed=0 total_steps=120000
    uv run python aggregate.py <the run dirs of both> --by implementation=tfrl

The same: the algorithm and its hyper-parameters (learning rate, tau, policy delay, target smoothing
and exploration noise, both in units of the action half-range as SB3 acts in [-1, 1]), the network's
hidden sizes and activation with PyTorch's default init, batch size, buffer capacity, random steps
before learning, the update cadence (`updates_per_step`, `train_every`), gamma, truncation kept
apart from termination, and the evaluation: `eval_episodes` deterministic episodes at step 0, every
`eval_every` steps and at the end, on an env whose first reset is seeded with seed + 100, written
to eval.csv with train.py's columns. Not the same: SB3's code and its random streams. A setting SB3
cannot reproduce (two learning rates, critic weight decay, prioritized or n-step replay, several
envs, bfloat16 matmuls) is refused with the reason.
"""
from __future__ import annotations

import csv
import json
import os
import shutil
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)  # conf/config.yaml's Hydra callbacks live in training/callbacks.py

import gymnasium as gym  # noqa: E402
import hydra  # noqa: E402
import numpy as np  # noqa: E402
from hydra.core.hydra_config import HydraConfig  # noqa: E402
from omegaconf import DictConfig  # noqa: E402

EVAL_COLUMNS = ("step", "return_mean", "return_std", "return_min", "return_max", "length_mean", "wall_time")


class SettingError(ValueError):
    """A setting of the composed run that SB3 cannot reproduce."""


def sb3_settings(cfg: DictConfig) -> tuple[str, dict]:
    """("td3" | "ddpg", keyword arguments of SB3's constructor other than env, noise and seed),
    from the composed train.py config; SettingError where SB3 has no equivalent. The activation is
    named in `policy_kwargs["activation"]`; `train` turns it into SB3's `activation_fn`."""
    agent = str(cfg.agent._target_).rsplit(".", 1)[-1].lower()
    if agent not in ("td3", "ddpg"):
        raise SettingError(f"agent {cfg.agent._target_}: only td3 and ddpg are compared with SB3 here")
    a = cfg.agent
    problems = []
    if float(a.actor_lr) != float(a.critic_lr):
        problems.append(f"actor_lr {a.actor_lr} != critic_lr {a.critic_lr} (SB3 has one learning_rate)")
    if float(a.get("critic_l2", 0.0)) != 0.0:
        problems.append("critic_l2 (SB3's critic has no weight decay)")
    if not str(cfg.buffer._target_).endswith("UniformReplay") or int(cfg.buffer.get("n_step", 1)) != 1:
        problems.append(f"buffer {cfg.buffer._target_} n_step {cfg.buffer.get('n_step', 1)} (compare with uniform, n_step 1)")
    if int(cfg.num_envs) != 1:
        problems.append(f"num_envs {cfg.num_envs} (compare with 1)")
    if cfg.network.get("init", "torch") != "torch":
        problems.append(f"network.init {cfg.network.init} (SB3 uses PyTorch's default init, network.init=torch)")
    if cfg.network.activation not in ("relu", "tanh"):
        problems.append(f"network.activation {cfg.network.activation} (relu or tanh)")
    if cfg.get("update_precision", "float32") != "float32":
        problems.append(f"update_precision {cfg.update_precision} (SB3 runs float32)")
    gradient_steps = float(cfg.updates_per_step) * int(cfg.train_every)
    if gradient_steps != int(gradient_steps) or gradient_steps < 1:
        problems.append(f"updates_per_step x train_every = {gradient_steps} (SB3 needs a whole number of updates per phase)")
    if problems:
        raise SettingError("; ".join(problems))
    kwargs = dict(
        learning_rate=float(a.actor_lr), buffer_size=int(cfg.buffer.capacity), learning_starts=int(cfg.learning_starts),
        batch_size=int(cfg.batch_size), tau=float(a.tau), gamma=float(cfg.gamma),
        train_freq=int(cfg.train_every), gradient_steps=int(gradient_steps),
        policy_kwargs=dict(net_arch=[int(h) for h in cfg.network.hidden], activation=str(cfg.network.activation)),
        device="cpu", verbose=0,
    )
    if agent == "td3":
        kwargs.update(policy_delay=int(a.policy_delay), target_policy_noise=float(a.target_noise),
                      target_noise_clip=float(a.noise_clip))
    return agent, kwargs


def make_env(cfg: DictConfig, eval: bool = False) -> gym.Env:
    limit = (cfg.env.get("eval_max_episode_steps") if eval else None) or cfg.env.max_episode_steps
    return gym.make(cfg.env.id, max_episode_steps=limit, **dict(cfg.env.kwargs))


def evaluate(model, env: gym.Env, episodes: int, seed: int) -> dict[str, float]:
    """train.py's evaluation (training/loop.py `evaluate`, which this venv cannot import: it needs
    TensorFlow) with SB3's deterministic policy."""
    returns, lengths = [], []
    obs, _ = env.reset(seed=seed)
    for _ in range(episodes):
        done, ret, length = False, 0.0, 0
        while not done:
            action, _ = model.predict(obs, deterministic=True)
            obs, reward, terminated, truncated, _ = env.step(action)
            ret, length, done = ret + float(reward), length + 1, terminated or truncated
        returns.append(ret)
        lengths.append(length)
        obs, _ = env.reset()
    r = np.asarray(returns)
    return {"return_mean": float(r.mean()), "return_std": float(r.std()), "return_min": float(r.min()),
            "return_max": float(r.max()), "length_mean": float(np.mean(lengths))}


def train(cfg: DictConfig, run_dir: str, agent: str, kwargs: dict) -> dict:
    """Train SB3's `agent` with `kwargs` (from `sb3_settings(cfg)`), evaluating into run_dir/eval.csv."""
    import torch
    from stable_baselines3 import DDPG, TD3
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.noise import NormalActionNoise

    net = kwargs["policy_kwargs"]
    policy_kwargs = dict(net_arch=net["net_arch"], activation_fn={"relu": torch.nn.ReLU, "tanh": torch.nn.Tanh}[net["activation"]])
    if cfg.sb3.threads:
        torch.set_num_threads(int(cfg.sb3.threads))
    env, eval_env = make_env(cfg), make_env(cfg, eval=True)
    n = env.action_space.shape[0]  # SB3 acts in [-1, 1], so its noise is in units of the half-range
    noise = NormalActionNoise(np.zeros(n), float(cfg.agent.exploration_noise) * np.ones(n))
    model = {"td3": TD3, "ddpg": DDPG}[agent]("MlpPolicy", env, action_noise=noise, seed=int(cfg.seed),
                                              **{**kwargs, "policy_kwargs": policy_kwargs})
    total, every, episodes, eval_seed = int(cfg.total_steps), int(cfg.eval_every), int(cfg.eval_episodes), int(cfg.seed) + 100
    evals: list[dict] = []
    t0 = time.perf_counter()
    path = os.path.join(run_dir, "eval.csv")
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=EVAL_COLUMNS)
        writer.writeheader()

        def record(step: int) -> None:
            result = {"step": step, **evaluate(model, eval_env, episodes, eval_seed), "wall_time": time.perf_counter() - t0}
            evals.append(result)
            writer.writerow(result)
            f.flush()
            print(f"step {step}: eval return {result['return_mean']:.1f}", flush=True)

        class EvalEvery(BaseCallback):
            def _on_step(self) -> bool:
                if self.num_timesteps % every == 0 and self.num_timesteps < total:
                    record(self.num_timesteps)
                return True

        record(0)
        model.learn(total_timesteps=total, callback=EvalEvery())
        record(model.num_timesteps)
    wall = time.perf_counter() - t0
    returns = [e["return_mean"] for e in evals]
    return {"stopped": False, "steps": int(model.num_timesteps), "final_return": returns[-1],
            "best_return": max(returns), "wall_time": wall, "steps_per_second": model.num_timesteps / wall,
            "implementation": "stable-baselines3", "agent": agent, "env": cfg.env.id,
            "sb3_settings": kwargs,
            "torch_threads": torch.get_num_threads()}


@hydra.main(version_base="1.3", config_path="../conf", config_name="sb3_learning")
def main(cfg: DictConfig) -> None:
    run_dir = HydraConfig.get().runtime.output_dir
    try:
        agent, kwargs = sb3_settings(cfg)
    except SettingError as err:
        if HydraConfig.get().mode.name == "RUN" and set(os.listdir(run_dir)) <= {".hydra", "sb3_learning.log"}:
            shutil.rmtree(run_dir, ignore_errors=True)  # Hydra made it for this command; nothing ran
        print(f"error: this run's settings cannot be reproduced with SB3: {err}. Change them on the command "
              f"line, or compare a different run.", file=sys.stderr)
        sys.exit(2)
    summary = train(cfg, run_dir, agent, kwargs)
    with open(os.path.join(run_dir, "summary.json"), "w") as f:
        json.dump(summary, f, indent=2)
    print(json.dumps({k: summary[k] for k in ("steps", "final_return", "best_return", "steps_per_second")}))


if __name__ == "__main__":
    main()
