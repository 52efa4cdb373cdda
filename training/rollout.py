"""The loop of on-policy agents (agents/ppo/): rollouts instead of replay. Each iteration, every env
steps `steps` times, acted in numpy by the current policy (its action, log-probability and value
kept); the rollout's advantages and returns come from GAE (agents/ppo/returns.py); then one
compiled call runs the whole update (every epoch and minibatch) and the rollout is dropped.
Evaluation, logging, checkpoints and stopping are every loop's (training/session.py), at rollout
boundaries: a checkpoint holds no rollout, only the envs mid-episode, so a resumed run goes on
exactly."""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Protocol

import gymnasium as gym
import numpy as np

from agents.ppo.returns import explained_variance, gae
from envs.factory import finished_games
from training.faults import check_finite
from training.loggers import Logger
from training.session import Evaluation, LoopHooks, Session


class RolloutLearner(Protocol):
    """What the loop drives (`agents.ppo.learner.CompiledRollout`)."""

    def step(self, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]: ...
    def values(self, obs: np.ndarray) -> np.ndarray: ...
    def scale_rewards(self, reward: np.ndarray, terminated: np.ndarray) -> np.ndarray: ...
    def env_action(self, action: np.ndarray) -> np.ndarray: ...
    def update(self, rollout: dict[str, np.ndarray], progress: float) -> dict[str, float]: ...
    def act(self, obs: np.ndarray, explore: bool) -> np.ndarray: ...


@dataclass(frozen=True)
class RolloutSettings:
    total_steps: int  # env steps summed over the envs; the run ends at the first rollout past it
    steps: int  # per env per rollout
    gamma: float
    gae_lambda: float
    bootstrap_truncation: bool
    eval_every: int
    eval_episodes: int
    seed: int
    eval_seed: int
    eval_epsilon: float = 0.0
    checkpoint_every: int = 0
    progress: bool = True

    def iterations(self, num_envs: int) -> int:
        """Rollouts in the run, as CleanRL counts them (total_timesteps // batch_size): what the
        learning rate anneals over."""
        return max(1, self.total_steps // (self.steps * num_envs))


@dataclass
class RolloutState:
    """What the loop carries from one rollout to the next; saved in checkpoints."""

    step: int = 0
    iteration: int = 0
    next_eval: int = 0
    next_checkpoint: int = 0
    best_return: float = -np.inf
    last_eval: dict | None = None
    obs: np.ndarray | None = None  # the training envs' current observations
    wall_time: float = 0.0
    evals: list = field(default_factory=list)


def initial_rollout_state(envs: gym.vector.VectorEnv, settings: RolloutSettings) -> RolloutState:
    obs, _ = envs.reset(seed=settings.seed)
    return RolloutState(obs=obs, next_checkpoint=settings.checkpoint_every or -1)


def collect(learner: RolloutLearner, envs: gym.vector.VectorEnv, obs: np.ndarray, steps: int,
            bootstrap_truncation: bool) -> tuple[dict[str, np.ndarray], np.ndarray, list, list]:
    """`steps` steps of every env from `obs`: the rollout's arrays (T x N; the observations as the
    policy saw them, the rewards as scaled), the envs' observations after it, and the episodes and
    games that ended in it (env step within the rollout, the env's own return, length). `next_values[t]` is V(s_{t+1}) of the transition's own episode: the next step's value,
    or at a time limit (with `bootstrap_truncation`) the value of the final observation."""
    n = envs.num_envs
    keys = ("obs", "action", "log_prob", "value", "reward", "terminated", "ended", "next_value")
    out: dict[str, list] = {k: [] for k in keys}
    episodes, games = [], []
    for t in range(steps):
        seen, action, log_prob, value = learner.step(obs)
        next_obs, reward, terminated, truncated, infos = envs.step(learner.env_action(action))
        ended = terminated | truncated
        reward = learner.scale_rewards(reward, terminated)
        for k, x in zip(keys[:7], (seen, action, log_prob, value, reward, terminated, ended)):
            out[k].append(x)
        next_value = np.zeros(n, np.float32)
        if bootstrap_truncation and truncated.any():
            cut = np.flatnonzero(truncated & ~terminated)
            if len(cut):
                next_value[cut] = learner.values(np.stack([infos["final_obs"][i] for i in cut]))
        out["next_value"].append(next_value)  # the next step's values are filled in below
        if "episode" in infos:
            for i in np.flatnonzero(infos["_episode"]):
                episodes.append((t + 1, float(infos["episode"]["r"][i]), int(infos["episode"]["l"][i])))
        games.extend((t + 1, score, length) for score, length in finished_games(infos, ended))
        obs = next_obs
    rollout = {k: np.stack(v) for k, v in out.items()}
    following = np.concatenate([rollout["value"][1:], learner.values(obs)[None]])
    # within an episode V(s_{t+1}) is the next step's value; across its end, the bootstrap above (or 0)
    rollout["next_value"] = np.where(rollout["ended"], rollout["next_value"], following)
    return rollout, obs, episodes, games


def update_batch(rollout: dict[str, np.ndarray], advantages: np.ndarray, returns: np.ndarray) -> dict[str, np.ndarray]:
    """What one update takes: the rollout's T x N samples flattened into one batch, with their targets."""
    flat = {k: rollout[k].reshape(-1, *rollout[k].shape[2:]) for k in ("obs", "action", "log_prob", "value")}
    return {**flat, "advantages": advantages.reshape(-1), "returns": returns.reshape(-1)}


def train_on_policy(learner: RolloutLearner, envs: gym.vector.VectorEnv, eval_env: gym.Env, settings: RolloutSettings,
                    logger: Logger, state: RolloutState | None = None, hooks: LoopHooks | None = None) -> dict:
    """Rollouts and their updates from `state` until `settings.total_steps`; a summary with the
    keys of the other loops' (`final_return`, `best_return`, ...) and `iterations`."""
    s, n = settings, envs.num_envs
    st = state if state is not None else initial_rollout_state(envs, s)
    session = Session(st, s.total_steps, Evaluation(learner, eval_env, s.eval_every, s.eval_episodes, s.eval_seed,
                                                    s.eval_epsilon), s.checkpoint_every, logger, hooks, s.progress)
    iterations = s.iterations(n)
    while st.step < s.total_steps:
        if st.step >= st.next_eval:
            st.next_eval += s.eval_every
            session.evaluate()
        t0 = time.perf_counter()
        rollout, st.obs, episodes, games = collect(learner, envs, st.obs, s.steps, s.bootstrap_truncation)
        t1 = time.perf_counter()
        terminated = rollout["ended"] if not s.bootstrap_truncation else rollout["terminated"]
        advantages, returns = gae(rollout["reward"], rollout["value"], rollout["next_value"], terminated,
                                  rollout["ended"], s.gamma, s.gae_lambda)
        metrics = learner.update(update_batch(rollout, advantages, returns), progress=min(st.iteration / iterations, 1.0))
        t2 = time.perf_counter()
        start = st.step
        session.advance(s.steps * n)
        st.iteration += 1
        for t, ret, length in episodes:
            logger.log("train", start + t * n, {"episode_return": ret, "episode_length": length})
        for t, score, length in games:
            logger.log("train", start + t * n, {"game_score": score, "game_length": length})
        record = {**metrics, "iteration": st.iteration, "steps_per_second": s.steps * n / (t2 - t0),
                  "rollout_seconds": t1 - t0, "update_seconds": t2 - t1,
                  "explained_variance": explained_variance(rollout["value"].reshape(-1), returns.reshape(-1))}
        logger.log("update", st.step, record)
        check_finite(record, st.step)
        if session.stop_requested():
            break
        if session.checkpoint_due():
            session.periodic_checkpoint()
    return {**session.finish(), "iterations": st.iteration}
