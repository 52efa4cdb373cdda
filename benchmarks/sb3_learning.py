"""Stable-Baselines3's TD3, DDPG, SAC, DQN or PPO (and sb3-contrib's CrossQ), trained with the settings of the train.py run that the
same overrides compose, and written as a run directory that aggregate.py reads: the reference check
of tfrl's learning. Runs in SB3's venv (`bash benchmarks/setup_sb3.sh`):

    benchmarks/.venv-sb3/bin/python benchmarks/sb3_learning.py agent=td3 env=hopper seed=0 total_steps=120000
    uv run python train.py agent=td3 env=hopper seed=0 total_steps=120000
    uv run python aggregate.py <the run dirs of both> --by implementation=tfrl

The same: the algorithm and its hyper-parameters, the network's hidden sizes and activation with
PyTorch's default init, batch size, buffer capacity, random steps before learning, the update
cadence (`updates_per_step`, `train_every`), gamma, n-step returns (`buffer.n_step` as SB3's
`n_steps`, whose targets `sb3_nstep_check.py` finds equal to tfrl's), truncation kept apart from
termination, and the evaluation (training/evaluation.py's, with SB3's deterministic policy):
`eval_episodes` episodes at step 0, every `eval_every` steps and at the end, on an env whose first
reset is seeded with seed + 100, written to eval.csv with train.py's columns.
- TD3 and DDPG: learning rate, tau, policy delay, target smoothing and exploration noise (in units
  of the action half-range, as SB3 acts in [-1, 1]).
- SAC: one learning rate for actor, critics and temperature, tau, the temperature's initial value
  (`ent_coef="auto_<init_alpha>"`), the target entropy, and the clamp of the policy's log standard
  deviation to [-20, 2] (tfrl's `agent.log_std=clip`, its default), and SB3's 1e-6 inside the
  squashed log density's log(1 - a^2 + 1e-6) (tfrl's `agent.tanh_epsilon`, its default).
  `sb3_sac_update_check.py` and `sb3_sac_chained_check.py` find the two updates the same.
- CrossQ (sb3-contrib): one learning rate, the policy delay, the temperature's initial value and
  the target entropy, the actor's and the critics' sizes (`net_arch` pi and qf), and Batch
  Renormalization's momentum, epsilon and warm-up; Adam's beta_1 is sb3-contrib's 0.5.
- PPO (agent=ppo_sb3, and the RL Zoo's tuned MuJoCo settings it takes with a MuJoCo env): rollout
  length and envs (DummyVecEnv, seeds seed + i), minibatch size (the rollout over
  `agent.num_minibatches`), epochs, learning rate (linear in the progress left when annealed), gamma,
  GAE lambda, clip range, advantage normalization, entropy and value weights (train.py's vf_coef
  carries CleanRL's 0.5: SB3's is half of it), gradient clip, separate pi and vf MLPs with their
  activation, `ortho_init` and `log_std_init`, and VecNormalize (observations and rewards, each
  clipped at 10, with gamma) for `network.obs_norm` and `agent.normalize_reward`; evaluations act on
  observations normalized with the statistics of the moment. CleanRL's value clipping, a target KL
  and time limits as terminations are refused.
- DQN: learning rate, Huber loss, gradient-norm clip, and epsilon's line: tfrl's starts at
  `eps_start` when learning starts and falls over `eps_decay_steps`, SB3's is a line over the whole
  run from step 0, so SB3 gets the same line extended back to step 0 (its epsilon before
  `learning_starts` is unused: both act at random there). The target network is copied at the same
  rate, every `target_update_every / updates_per_step` env steps; SB3 copies between update phases,
  so a copy can fall up to one phase's updates from tfrl's, and Polyak averaging (`agent.tau` < 1)
  needs one update per phase, as SB3 averages between phases.
Not the same: SB3's code and its random streams. A setting SB3 cannot reproduce (two learning
rates, critic weight decay, Double DQN, a dueling head, MSE loss, prioritized replay, several
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

import envs  # noqa: E402,F401 (registers this project's envs: Gridworld, MinAtar, Atari, DMC)
from training.evaluation import evaluate  # noqa: E402


class SettingError(ValueError):
    """A setting of the composed run that SB3 cannot reproduce."""


def sb3_settings(cfg: DictConfig) -> tuple[str, dict]:
    """("td3" | "ddpg" | "dqn", keyword arguments of SB3's constructor other than env, noise and
    seed), from the composed train.py config; SettingError, naming every such setting, where SB3
    has no equivalent. The activation is named in `policy_kwargs["activation"]`, and DQN's
    `max_grad_norm` is None for no clip; `build_model` turns them into SB3's `activation_fn` and inf."""
    agent = str(cfg.agent._target_).rsplit(".", 1)[-1].lower()
    if agent not in ("td3", "ddpg", "sac", "crossq", "dqn", "ppo"):
        raise SettingError(f"agent {cfg.agent._target_}: only td3, ddpg, sac, crossq, dqn and ppo are compared with SB3 "
                           f"here")
    problems = []
    if agent == "ppo":
        kwargs = _ppo_settings(cfg, problems)
        if problems:
            raise SettingError("; ".join(problems))
        return agent, kwargs
    cnn = str(cfg.network._target_) == "networks.cnn.conv_net"
    if not (cnn or str(cfg.network._target_).endswith(("mlp.mlp", "mlp.dueling_mlp"))):
        problems.append(f"network {cfg.network._target_} (compare with network=mlp, or a conv_net CNN: nature_cnn, "
                        f"minatar_cnn)")
    if cnn and (cfg.network.get("dueling") or cfg.network.get("random_shift")):
        problems.append("network.dueling or network.random_shift (SB3 has neither)")
    if not str(cfg.buffer._target_).endswith("UniformReplay"):
        problems.append(f"buffer {cfg.buffer._target_} (SB3 replays uniformly: compare with buffer=uniform)")
    if int(cfg.num_envs) != 1:
        problems.append(f"num_envs {cfg.num_envs} (compare with 1)")
    if cfg.network.get("init", "torch") != "torch":
        problems.append(f"network.init {cfg.network.init} (SB3 uses PyTorch's default init, network.init=torch)")
    if cfg.network.activation not in ("relu", "tanh"):
        problems.append(f"network.activation {cfg.network.activation} (relu or tanh)")
    if cfg.speed.update_precision != "float32":
        problems.append(f"speed.update_precision {cfg.speed.update_precision} (SB3 runs float32)")
    gradient_steps = float(cfg.updates_per_step) * int(cfg.train_every)
    if gradient_steps != int(gradient_steps) or gradient_steps < 1:
        problems.append(f"updates_per_step x train_every = {gradient_steps} (SB3 needs a whole number of updates per phase)")
    kwargs = dict(
        buffer_size=int(cfg.buffer.capacity), learning_starts=int(cfg.learning_starts),
        batch_size=int(cfg.batch_size), gamma=float(cfg.gamma),
        train_freq=int(cfg.train_every), gradient_steps=int(gradient_steps),
        n_steps=int(cfg.buffer.get("n_step", 1)),  # same targets as SB3's NStepReplayBuffer: sb3_nstep_check.py
        policy_kwargs=dict(net_arch=net_arch(cfg.network), activation=str(cfg.network.activation),
                           **({"convs": [[int(v) for v in c] for c in cfg.network.convs],
                               "features": cfg.network.get("features")} if cnn else {})),
        device="cpu", verbose=0,
    )
    if agent == "dqn":
        kwargs.update(_dqn_settings(cfg, int(gradient_steps), problems))
    else:
        kwargs.update(_actor_critic_settings(cfg, agent, problems))
    if problems:
        raise SettingError("; ".join(problems))
    return agent, kwargs


def net_arch(network: DictConfig) -> list[int] | dict[str, list[int]]:
    """SB3's net_arch: one list, or pi and qf apart where the actor has sizes of its own."""
    hidden = [int(h) for h in network.hidden]
    actor = network.get("actor_hidden")
    return hidden if actor is None else dict(pi=[int(h) for h in actor], qf=hidden)


def _actor_critic_settings(cfg: DictConfig, agent: str, problems: list[str]) -> dict:
    """TD3's, DDPG's and SAC's own arguments; what SB3 cannot reproduce is appended to `problems`."""
    a = cfg.agent
    rates = {k: float(a[k]) for k in ("actor_lr", "critic_lr", "alpha_lr") if k in a}
    if len(set(rates.values())) > 1:
        problems.append(f"{', '.join(f'{k} {v}' for k, v in rates.items())} (SB3 has one learning_rate)")
    if float(a.get("critic_l2", 0.0)) != 0.0:
        problems.append("critic_l2 (SB3's critic has no weight decay)")
    kwargs = dict(learning_rate=float(a.actor_lr))
    if "tau" in a:
        kwargs["tau"] = float(a.tau)
    if agent in ("sac", "crossq") and float(a.get("tanh_epsilon", 0.0)) != 1e-6:
        problems.append(f"agent.tanh_epsilon={a.get('tanh_epsilon', 0.0)} (SB3 and sb3-contrib take log(1 - a^2 + 1e-6): "
                        f"agent.tanh_epsilon=1e-6)")
    if agent == "crossq":
        if float(a.beta_1) != 0.5:
            problems.append(f"agent.beta_1 {a.beta_1} (sb3-contrib's CrossQ uses Adam's beta_1 0.5)")
        if not cfg.network.get("batch_renorm", False):
            problems.append("network.batch_renorm=false (sb3-contrib's CrossQ has Batch Renormalization)")
        kwargs.update(policy_delay=int(a.policy_delay), ent_coef=f"auto_{float(a.init_alpha)}",
                      target_entropy=a.target_entropy)
    if agent == "sac":
        if a.get("log_std", "clip") != "clip":
            problems.append(f"agent.log_std={a.log_std} (SB3 clamps the policy's log std to [-20, 2]: agent.log_std=clip)")
        kwargs.update(ent_coef=f"auto_{float(a.init_alpha)}", target_entropy=a.target_entropy)
    if agent == "td3":
        kwargs.update(policy_delay=int(a.policy_delay), target_policy_noise=float(a.target_noise),
                      target_noise_clip=float(a.noise_clip))
    return kwargs


def _dqn_settings(cfg: DictConfig, phase_updates: int, problems: list[str]) -> dict:
    """DQN's own arguments (`phase_updates`: updates per phase); what SB3 cannot reproduce is
    appended to `problems`."""
    a = cfg.agent
    if bool(a.double):
        problems.append("agent.double=true (SB3's DQN is plain DQN: compare with agent.double=false)")
    if str(cfg.network._target_).endswith("dueling_mlp"):
        problems.append("network=dueling_mlp (SB3's DQN has no dueling head: network=mlp)")
    if a.loss != "huber":
        problems.append(f"agent.loss={a.loss} (SB3's DQN uses the Huber loss)")
    updates_per_step, train_every = float(cfg.updates_per_step), int(cfg.train_every)
    tau = float(a.tau)
    if tau < 1.0:
        interval = train_every  # one Polyak step between phases, as tfrl's one per update
        if phase_updates != 1:
            problems.append(f"agent.tau={tau} with {phase_updates} updates per phase (tfrl averages the target "
                            "after each update, SB3 between phases: compare with one update per phase)")
    else:
        interval = int(a.target_update_every) / updates_per_step  # env steps between copies
        if interval != int(interval) or int(a.target_update_every) < phase_updates:
            problems.append(f"agent.target_update_every={a.target_update_every} updates at {phase_updates} per phase "
                            f"and {updates_per_step} per env step (SB3 copies the target between phases, every "
                            "whole number of env steps: make it a whole number of env steps and at least one phase)")
    start, end, decay = float(a.eps_start), float(a.eps_end), int(a.eps_decay_steps)
    if decay < 1:
        problems.append(f"agent.eps_decay_steps={decay} (SB3's epsilon needs a line of at least one step)")
        decay = 1
    learning_starts, total = int(cfg.learning_starts), int(cfg.total_steps)
    return dict(
        learning_rate=float(a.lr), tau=tau, target_update_interval=max(int(interval), 1),
        max_grad_norm=float(a.max_grad_norm) if a.max_grad_norm else None,  # None: no clip
        # tfrl's line, from (learning_starts, eps_start) to (learning_starts + decay, eps_end), as
        # SB3's: from step 0 (the same line extended back) to a fraction of the run
        exploration_initial_eps=start + (start - end) * learning_starts / decay,
        exploration_final_eps=end, exploration_fraction=(learning_starts + decay) / total,
    )


def _ppo_settings(cfg: DictConfig, problems: list[str]) -> dict:
    """PPO's arguments (agent=ppo_sb3 composes SB3's own; conf/tuned/ppo_sb3_<env>.yaml the RL Zoo's),
    with `normalize` for VecNormalize; what SB3 cannot reproduce is appended to `problems`."""
    a, net = cfg.agent, cfg.network
    if str(net._target_) != "agents.ppo.PPONetworks":
        problems.append(f"network {net._target_} (PPO's networks are network=ppo's)")
    if not a.bootstrap_truncation:
        problems.append("agent.bootstrap_truncation=false (SB3 bootstraps a time limit with V(final obs): true)")
    if a.clip_vloss:
        problems.append("agent.clip_vloss=true (SB3's clip_range_vf clips the value, not CleanRL's max of two errors: "
                        "compare with false)")
    if a.target_kl is not None:
        problems.append(f"agent.target_kl={a.target_kl} (SB3 checks it per minibatch at 1.5x: compare with null)")
    if a.get("optimizer", "adam") != "adam" or float(a.get("optimizer_eps", 1e-5)) != 1e-5:
        problems.append("agent.optimizer / optimizer_eps (SB3's PPO takes Adam with epsilon 1e-5)")
    rollout = int(a.n_steps) * int(cfg.num_envs)
    if rollout % int(a.num_minibatches):
        problems.append(f"agent.num_minibatches={a.num_minibatches} does not divide the rollout of {rollout}")
    return dict(
        n_envs=int(cfg.num_envs), n_steps=int(a.n_steps), batch_size=rollout // int(a.num_minibatches),
        n_epochs=int(a.update_epochs), learning_rate=float(a.lr), anneal_lr=bool(a.anneal_lr),
        gamma=float(cfg.gamma), gae_lambda=float(a.gae_lambda), clip_range=float(a.clip_coef),
        normalize_advantage=bool(a.norm_adv), ent_coef=float(a.ent_coef),
        vf_coef=float(a.vf_coef) / 2,  # SB3's loss is vf_coef x MSE; train.py's 0.5 x vf_coef x MSE (CleanRL's)
        max_grad_norm=float(a.max_grad_norm),
        policy_kwargs=dict(net_arch=dict(pi=[int(h) for h in net.hidden], vf=[int(h) for h in net.hidden]),
                           activation=str(net.activation), ortho_init=bool(net.get("ortho_init", True)),
                           log_std_init=float(a.get("log_std_init", 0.0))),
        normalize=dict(norm_obs=bool(net.obs_norm), norm_reward=bool(a.normalize_reward), clip_obs=10.0,
                       clip_reward=10.0, gamma=float(cfg.gamma)),
        deterministic_eval=bool(a.deterministic_eval),
        device="cpu", verbose=0,
    )


def make_env(cfg: DictConfig, eval: bool = False, index: int = 0) -> gym.Env:
    """The env train.py makes: its frames stacked (env.frame_stack), `env.eval_kwargs` over
    `env.kwargs` for evaluation (Atari's whole games and unclipped scores); the `index`-th of several
    seeded seed + index."""
    from envs.factory import make_env as make
    from training.config import frame_stack

    limit = (cfg.env.get("eval_max_episode_steps") if eval else None) or cfg.env.max_episode_steps
    kwargs = {**cfg.env.kwargs, **(cfg.env.get("eval_kwargs") or {} if eval else {})}
    return make(cfg.env.id, int(cfg.seed) + index, max_episode_steps=limit, kwargs=kwargs,
                frame_stack=frame_stack(cfg))


def ppo_env(cfg: DictConfig, kwargs: dict, saved: str | None = None):
    """PPO's `n_envs` envs in SB3's DummyVecEnv, behind VecNormalize with `kwargs["normalize"]` (or its
    statistics saved in `saved`, to continue a run)."""
    from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize

    venv = DummyVecEnv([lambda i=i: make_env(cfg, index=i) for i in range(kwargs["n_envs"])])
    if saved:
        return VecNormalize.load(saved, venv)
    return VecNormalize(venv, **kwargs["normalize"])


def conv_features(net: dict, image_shape: tuple[int, int, int]):
    """SB3's features extractor with the convolutions of networks/cnn.py's `conv_net` (valid padding,
    PyTorch's default init, images scaled by SB3 as by tfrl), flattened, then `features` when set;
    the dense layers after it are SB3's net_arch. SB3 hands images channels first, transposing
    (H, W, C) itself unless it takes C for H (MinAtar's Seaquest, 10 x 10 x 10): the layout is
    read from the space it hands over."""
    import torch
    from stable_baselines3.common.torch_layers import BaseFeaturesExtractor

    activation = {"relu": torch.nn.ReLU, "tanh": torch.nn.Tanh}[net["activation"]]

    def layers() -> tuple[list, int]:
        """New modules on every call: SB3 makes one extractor for the online Q-network and one for
        its target, and modules made once here would be shared by both (the target would then be
        the online network itself, and DQN would not learn)."""
        h, w, c = image_shape
        made, channels = [], c
        for filters, kernel, stride in net["convs"]:
            made += [torch.nn.Conv2d(channels, filters, kernel, stride), activation()]
            h, w, channels = (h - kernel) // stride + 1, (w - kernel) // stride + 1, filters
        made.append(torch.nn.Flatten())
        size = h * w * channels
        if net["features"]:
            made += [torch.nn.Linear(size, int(net["features"])), activation()]
            size = int(net["features"])
        return made, size

    class ConvFeatures(BaseFeaturesExtractor):
        def __init__(self, space):
            made, size = layers()
            super().__init__(space, size)
            self.net = torch.nn.Sequential(*made)
            self.transposed = tuple(space.shape) != tuple(image_shape)  # SB3 made it (C, H, W)

        def forward(self, obs):
            return self.net(obs if self.transposed else obs.permute(0, 3, 1, 2))

    return ConvFeatures


class SB3Policy:
    """SB3's deterministic policy behind the Agent protocol's `act`, for training/evaluation.py; for
    PPO on a VecNormalize, on observations normalized with the training statistics of the moment
    (as train.py's evaluations), sampled when `deterministic` is false."""

    def __init__(self, model, normalizer=None, deterministic: bool = True):
        self.model, self.normalizer, self.deterministic = model, normalizer, deterministic

    def act(self, obs: np.ndarray, explore: bool) -> np.ndarray:
        if self.normalizer is not None:
            obs = self.normalizer.normalize_obs(obs)
        return self.model.predict(obs, deterministic=self.deterministic and not explore)[0]


def build_model(cfg: DictConfig, agent: str, kwargs: dict, env: gym.Env):
    """SB3's `agent` on `env` with `kwargs` (from `sb3_settings(cfg)`), as `train` runs it."""
    import torch
    from stable_baselines3 import DDPG, DQN, SAC, TD3
    from stable_baselines3.common.noise import NormalActionNoise

    net = kwargs["policy_kwargs"]
    policy_kwargs = dict(net_arch=net["net_arch"], activation_fn={"relu": torch.nn.ReLU, "tanh": torch.nn.Tanh}[net["activation"]])
    policy = "MlpPolicy"
    if "convs" in net:
        policy = "CnnPolicy"
        policy_kwargs["features_extractor_class"] = conv_features(net, tuple(env.observation_space.shape))
    model_kwargs = {**kwargs, "policy_kwargs": policy_kwargs}
    if agent == "ppo":
        from stable_baselines3 import PPO

        policy_kwargs.update(ortho_init=net["ortho_init"], log_std_init=net["log_std_init"])
        for key in ("n_envs", "normalize", "deterministic_eval", "anneal_lr"):
            model_kwargs.pop(key)
        if kwargs["anneal_lr"]:  # linear in the progress left, to 0 at the end (SB3's schedule)
            model_kwargs["learning_rate"] = lambda left, lr=kwargs["learning_rate"]: lr * left
        return PPO("MlpPolicy", env, seed=int(cfg.seed), **model_kwargs)
    if agent == "dqn":
        model_kwargs["max_grad_norm"] = kwargs["max_grad_norm"] or float("inf")  # SB3 always clips
        model = DQN(policy, env, seed=int(cfg.seed), **model_kwargs)
    elif agent == "sac":
        model = SAC(policy, env, seed=int(cfg.seed), **model_kwargs)
    elif agent == "crossq":
        from sb3_contrib import CrossQ

        policy_kwargs.update(batch_norm=True, batch_norm_momentum=float(cfg.network.renorm_momentum),
                             batch_norm_eps=float(cfg.network.renorm_epsilon),
                             renorm_warmup_steps=int(cfg.network.renorm_warmup))
        model = CrossQ("MlpPolicy", env, seed=int(cfg.seed), **model_kwargs)
    else:
        n = env.action_space.shape[0]  # SB3 acts in [-1, 1], so its noise is in units of the half-range
        noise = NormalActionNoise(np.zeros(n), float(cfg.agent.exploration_noise) * np.ones(n))
        model = {"td3": TD3, "ddpg": DDPG}[agent](policy, env, action_noise=noise, seed=int(cfg.seed), **model_kwargs)
    return model


def train(cfg: DictConfig, run_dir: str, agent: str, kwargs: dict) -> dict:
    """Train SB3's `agent` with `kwargs` (from `sb3_settings(cfg)`), evaluating into run_dir/eval.csv."""
    import torch
    from stable_baselines3.common.callbacks import BaseCallback

    if cfg.sb3.threads:
        torch.set_num_threads(int(cfg.sb3.threads))
    saved = os.path.join(run_dir, "sb3_checkpoint")
    # the same command with resume=auto continues the run (from a save whose state.json, written
    # last, is there: the one put in place, or one written whole but stopped before it was put in place)
    found = [d for d in (saved, saved + ".tmp") if os.path.exists(os.path.join(d, "state.json"))]
    on_policy = agent == "ppo"
    if on_policy:
        env = ppo_env(cfg, kwargs, os.path.join(found[0], "vecnormalize.pkl") if found else None)
    else:
        env = make_env(cfg)
    eval_env = make_env(cfg, eval=True)
    model = build_model(cfg, agent, kwargs, env)
    start, wall_before = 0, 0.0
    if found:
        with open(os.path.join(found[0], "state.json")) as f:
            state = json.load(f)
        start, wall_before = int(state["step"]), float(state["wall_time"])
        model = type(model).load(os.path.join(found[0], "model.zip"), env=env)
        if not on_policy:
            model.load_replay_buffer(os.path.join(found[0], "replay.pkl"))
        print(f"continuing from the checkpoint at step {start}", flush=True)
    policy = (SB3Policy(model, env if kwargs["normalize"]["norm_obs"] else None, kwargs["deterministic_eval"])
              if on_policy else SB3Policy(model))
    total, every = int(cfg.total_steps), int(cfg.eval_every)
    save_every = int(cfg.sb3.checkpoint_every or 0)
    # the evaluations up to the save's own step are kept: the callback evaluates before it saves
    with EvalLog(run_dir, policy, eval_env, cfg, resume_at=start + 1 if start else None, wall_before=wall_before) as log:

        class EvalEvery(BaseCallback):
            def _on_step(self) -> bool:
                if self.num_timesteps % every == 0 and self.num_timesteps < total:
                    log.record(self.num_timesteps)
                if save_every and self.num_timesteps % save_every == 0 and self.num_timesteps < total:
                    save_sb3(saved, model, self.num_timesteps, time.perf_counter() - log.t0)
                if on_policy:  # whole rollouts up to total_steps or past it, as train.py's
                    return True
                # SB3 collects whole phases of train_freq steps; stop at total_steps as train.py
                # does, without the phase the rest would have reached
                return self.num_timesteps < total or total % kwargs["train_freq"] == 0

        if not start:
            log.record(0)
        model.learn(total_timesteps=total - start, callback=EvalEvery(), reset_num_timesteps=not start)
        log.record(model.num_timesteps)
    return {**log.summary(int(model.num_timesteps)), "implementation": "stable-baselines3", "agent": agent,
            "env": cfg.env.id, "sb3_settings": kwargs, "torch_threads": torch.get_num_threads()}


def save_sb3(saved: str, model, step: int, wall: float) -> None:
    """The model (weights, optimizers, schedules) and its replay buffer (PPO: its VecNormalize), written apart and then put in
    place, so a run stopped while saving continues from the checkpoint before. What it does not keep:
    the env's episode in progress (a continued run starts a new one) and the random streams, so a
    continued run is the same algorithm and settings, not the same numbers."""
    partial = saved + ".tmp"
    shutil.rmtree(partial, ignore_errors=True)
    os.makedirs(partial)
    model.save(os.path.join(partial, "model.zip"))
    if hasattr(model, "replay_buffer"):
        model.save_replay_buffer(os.path.join(partial, "replay.pkl"))
    else:  # PPO: its VecNormalize's statistics
        model.get_env().save(os.path.join(partial, "vecnormalize.pkl"))
    with open(os.path.join(partial, "state.json"), "w") as f:
        json.dump({"step": step, "wall_time": wall}, f)
    shutil.rmtree(saved, ignore_errors=True)
    os.rename(partial, saved)


class EvalLog:
    """A reference implementation's evaluations, as train.py's: `cfg.eval_episodes` episodes of
    `policy` on `eval_env` (its first reset seeded with seed + 100) at each `record(step)`, written
    to run_dir/eval.csv with train.py's columns as they come."""

    def __init__(self, run_dir: str, policy, eval_env, cfg: DictConfig, resume_at: int | None = None,
                 wall_before: float = 0.0):
        self.policy, self.eval_env = policy, eval_env
        self.episodes, self.seed = int(cfg.eval_episodes), int(cfg.seed) + 100
        self.epsilon = float(cfg.get("eval_epsilon") or 0.0)  # Atari's evaluation protocol, as train.py's
        self.path = os.path.join(run_dir, "eval.csv")
        self.evals: list[dict] = []
        # a run continued from its checkpoint at step resume_at keeps the evaluations before it and
        # the wall time it had spent
        self.resume_at, self.wall_before = resume_at, wall_before

    def __enter__(self) -> "EvalLog":
        if self.resume_at is not None and os.path.exists(self.path):
            with open(self.path, newline="") as f:
                kept = [row for row in csv.DictReader(f) if int(row["step"]) < self.resume_at]
            self.evals = [{k: float(v) if k != "step" else int(v) for k, v in row.items()} for row in kept]
        self._file = open(self.path, "w", newline="")
        self._writer = csv.writer(self._file)
        if self.evals:
            self._writer.writerow(self.evals[0].keys())
            self._writer.writerows(e.values() for e in self.evals)
            self._file.flush()
        self.t0 = time.perf_counter() - self.wall_before
        return self

    def __exit__(self, *exc) -> None:
        self.wall = time.perf_counter() - self.t0
        self._file.close()

    def record(self, step: int) -> None:
        result = {"step": step, **evaluate(self.policy, self.eval_env, self.episodes, self.seed, self.epsilon),
                  "wall_time": time.perf_counter() - self.t0}
        if not self.evals:  # train.py's columns, with success_rate where the env reports it
            self._writer.writerow(result.keys())
        self.evals.append(result)
        self._writer.writerow(result.values())
        self._file.flush()
        print(f"step {step}: eval return {result['return_mean']:.1f}", flush=True)

    def summary(self, steps: int) -> dict:
        """summary.json's common keys, once the log is closed."""
        returns = [e["return_mean"] for e in self.evals]
        return {"stopped": False, "steps": steps, "final_return": returns[-1], "best_return": max(returns),
                "wall_time": self.wall, "steps_per_second": steps / self.wall}


@hydra.main(version_base="1.3", config_path="../conf", config_name="sb3_learning")
def main(cfg: DictConfig) -> None:
    run_dir = HydraConfig.get().runtime.output_dir
    try:
        agent, kwargs = sb3_settings(cfg)
    except SettingError as err:
        refuse(run_dir, f"this run's settings cannot be reproduced with SB3: {err}. Change them on the command "
                        f"line, or compare a different run.")
    finish(run_dir, train(cfg, run_dir, agent, kwargs))


def refuse(run_dir: str, message: str) -> None:
    """Exit 2 with `error: message`, removing the run dir Hydra made for this command if nothing ran in it."""
    if HydraConfig.get().mode.name == "RUN" and all(f == ".hydra" or f.endswith(".log") for f in os.listdir(run_dir)):
        shutil.rmtree(run_dir, ignore_errors=True)
    print(f"error: {message}", file=sys.stderr)
    sys.exit(2)


def finish(run_dir: str, summary: dict) -> None:
    """Write summary.json as train.py does and print its headline figures."""
    with open(os.path.join(run_dir, "summary.json"), "w") as f:
        json.dump(summary, f, indent=2)
    print(json.dumps({k: summary[k] for k in ("steps", "final_return", "best_return", "steps_per_second")}))


if __name__ == "__main__":
    main()
