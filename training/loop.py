"""The off-policy training loop. It drives any agent through the Learner protocol and never knows
which algorithm it is: act and store, learn when updates are due, log, and between iterations what
every loop does (training/session.py: evaluate, checkpoint, stop). With a `GraphDriver`
(training/driven.py) the env steps between events run from inside one compiled call."""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import gymnasium as gym
import numpy as np

from agents.compiling import Learner
from agents.needs import PolicyCheckpoints
from buffers.types import Buffer
from envs.factory import check_same_step_autoreset, finished_games, transition_next_obs
from training.assessment import Assessment, assess
from training.driven import GraphDriver
from training.faults import check_finite
from training.loggers import Logger
from training.session import Evaluation, LoopHooks, Session


@dataclass(frozen=True)
class LoopSettings:
    total_steps: int  # env steps (transitions) over all vector envs
    learning_starts: int  # uniform random actions and no updates before this many steps
    batch_size: int
    updates_per_step: float  # gradient updates per env step; 0.25 = one update every 4 steps
    eval_every: int
    eval_episodes: int
    log_every: int
    seed: int
    eval_seed: int  # the evaluation env's first reset
    eval_epsilon: float = 0.0  # random actions in evaluation (Atari's protocol: 0.05)
    checkpoint_every: int = 0  # env steps between checkpoints; 0 = none but the final one
    train_every: int = 1  # env steps between update phases; the updates due are done together
    fuse_updates: bool = True  # the updates of one phase in one compiled call
    # env steps one call of the GraphDriver may drive from inside the compiled update loop
    # (0: the loop calls the update every phase); needs fuse_updates and a driver
    steps_per_call: int = 0
    progress: bool = True
    num_envs: int = 1
    # updates at training episodes' ends, as many as are due (SB3's train_freq=(1, "episode")); the
    # policy acts from the first episode end past learning_starts on, and that end trains nothing
    # (sfujim/TD7's allow_train). With policy checkpoints (training/assessment.py), they decide.
    train_at_episode_ends: bool = False
    policy_checkpoints: PolicyCheckpoints | None = None


@dataclass
class LoopState:
    """Everything the loop carries from one iteration to the next; saved in checkpoints."""

    step: int = 0
    updates: int = 0
    updates_due: float = 0.0
    # updates of the current phase not yet done: a stop request can end a long phase (TD7's, at an
    # episode's end) between its updates, and a continued run does these first
    pending: int = 0
    next_eval: int = 0
    next_log: int = 0
    next_checkpoint: int = 0
    best_return: float = -np.inf
    last_eval: dict | None = None
    obs: np.ndarray | None = None  # the training envs' current observations
    wall_time: float = 0.0  # seconds spent in the loop over all sessions of the run
    evals: list = field(default_factory=list)  # (step, return_mean) of every evaluation
    policy_acts: bool = False  # training at episode ends: the first episode end past learning_starts is behind
    assessment: tuple = ()  # the policy checkpoints' Assessment (empty: its start)
    blocks: int = 0  # blocks of the agent's (`Needs.block`) run so far


def initial_state(envs: gym.vector.VectorEnv, settings: LoopSettings) -> LoopState:
    obs, _ = envs.reset(seed=settings.seed)
    return LoopState(obs=obs, next_log=settings.log_every, next_checkpoint=settings.checkpoint_every or -1)


class OffPolicyLoop:
    """One session of off-policy training. `run()` reads top to bottom: each iteration evaluates when
    due, steps the envs and learns (per update phase, or many steps in one driven call), logs, and
    stops or checkpoints between iterations."""

    def __init__(self, learner: Learner, buffer: Buffer, envs: gym.vector.VectorEnv, eval_env: gym.Env,
                 settings: LoopSettings, logger: Logger, state: LoopState, hooks: LoopHooks,
                 driver: GraphDriver | None = None):
        self.learner, self.buffer, self.envs, self.s, self.logger, self.st = learner, buffer, envs, settings, logger, state
        self.hooks, self.driver, self.block = hooks, driver, learner.block
        self.session = Session(state, settings.total_steps,
                               Evaluation(learner, eval_env, settings.eval_every, settings.eval_episodes,
                                          settings.eval_seed, settings.eval_epsilon),
                               settings.checkpoint_every, logger, hooks, settings.progress)
        self.metrics: dict | None = None  # the last update's
        self.t_log, self.step_log = time.perf_counter(), state.step
        self.episodes: list[tuple[int, float, int]] = []  # (step, return, length) of episodes not yet logged
        self.games: list[tuple[int, float, int]] = []  # (step, score, length) of games, where they are not episodes
        # fused: a phase's updates in one call, their batches drawn together unless the buffer's priorities
        # must come back between them (prioritized replay: one batch per call)
        self.fused = settings.fuse_updates and buffer.draws_together
        self.call_start, self.more = 0, False  # the driven call under way: its first step, whether it goes on

    def run(self) -> dict:
        st, s, session = self.st, self.s, self.session
        while st.step < s.total_steps or st.pending:  # pending at the end: a driven call ended for a block
            if st.step >= st.next_eval and not st.pending:  # after the phase a stop cut short, as without the stop
                st.next_eval += s.eval_every
                session.evaluate()
            if self.driven():
                self.driven_call()
            else:
                self.phase()
            self.log_episodes()
            if st.step >= st.next_log:
                self.log_updates()
            if session.stop_requested():
                break
            if session.checkpoint_due():
                check_finite(self.metrics, st.step)
                session.periodic_checkpoint()
        return {**session.finish(), "updates": st.updates}

    # --- acting and learning ------------------------------------------------------------------
    def env_step(self) -> int:
        """One step of every env: act, step, store, count the updates due. Returns how many
        updates are due now (0 outside an update phase)."""
        st, s, envs = self.st, self.s, self.envs
        at_episode_ends = s.train_at_episode_ends
        learning = st.policy_acts if at_episode_ends else st.step >= s.learning_starts  # sfujim/TD3: t >= start_timesteps
        self.learner.observe(st.obs)  # random steps too: running statistics count every observation
        action = self.learner.act(st.obs, explore=True) if learning else envs.action_space.sample()
        next_obs, reward, terminated, truncated, infos = envs.step(action)
        done = terminated | truncated
        self.buffer.add(st.obs, action, reward, transition_next_obs(next_obs, infos, done), terminated, truncated)
        st.obs = next_obs
        self.session.advance(envs.num_envs)
        if learning:
            st.updates_due += envs.num_envs * s.updates_per_step
        train_now = not at_episode_ends and st.step % s.train_every < envs.num_envs
        if "episode" in infos:
            for i in np.flatnonzero(infos["_episode"]):
                ret, length = float(infos["episode"]["r"][i]), int(infos["episode"]["l"][i])
                self.episodes.append((st.step, ret, length))
                if at_episode_ends and st.policy_acts:
                    train_now |= self.episode_end(ret)
                elif at_episode_ends and st.step > s.learning_starts:
                    st.policy_acts = True
        self.games.extend((st.step, score, length) for score, length in finished_games(infos, done))
        if not learning or not train_now:
            return 0
        # The sum of a ratio such as 0.1 or 0.3 falls a float rounding short of a whole update
        # (ten 0.1s add up to 0.9999999999999999); the tolerance counts it, so no update comes late.
        n = int(st.updates_due + 1e-9)
        st.updates_due -= n
        st.updates += n
        return n

    def episode_end(self, ret: float) -> bool:
        """A training episode's end, past the first: whether the updates due train now."""
        st, checkpoints = self.st, self.s.policy_checkpoints
        if checkpoints is None:
            return True
        state, train_now, keep = assess(Assessment(*st.assessment), ret, checkpoints, st.updates,
                                        int(st.updates_due + 1e-9))
        st.assessment = tuple(state)
        if keep:
            self.learner.keep_policy()
        return train_now

    def phase(self) -> None:
        """Steps the envs once and runs the updates that came due, in as few calls as the buffer
        and the agent's block allow; a stop request can end a long phase between its calls."""
        st = self.st
        if not st.pending:
            st.pending = self.env_step()
        while st.pending:
            if self.block_due():
                self.run_block()
            k = self.before_block(st.pending if self.fused else 1)
            self.metrics = self.learner.learn(self.buffer, self.s.batch_size, k)
            st.pending -= k
            if st.pending and self.stop_in_phase():
                break

    def stop_in_phase(self) -> bool:
        """Whether a stop request ends the current update phase before its last update. Not in the
        run's last phase, which a stopped run would otherwise leave undone at total_steps."""
        return self.st.step < self.s.total_steps and self.hooks.stop_requested()

    # --- the agent's block (`Needs.block`: MR.Q's encoder in its author's schedule) ------------------
    def block_due(self) -> bool:
        """Whether the agent's block comes before the next update (its every-th, the first included)."""
        st = self.st
        return self.block is not None and st.blocks <= (st.updates - st.pending) // self.block.every

    def run_block(self) -> None:
        """The agent's block: its draws from the buffer as it is now, as many per call as fit."""
        for i, k in enumerate(self.learner.block_chunks(self.s.batch_size)):
            self.learner.run_block(self.block.replay.draw(self.buffer, self.s.batch_size, k), start=i == 0)
        self.st.blocks += 1

    def before_block(self, k: int) -> int:
        """k updates capped at those before the next block."""
        if self.block is None:
            return k
        done = self.st.updates - self.st.pending
        return min(k, (done // self.block.every + 1) * self.block.every - done)

    # --- many steps in one compiled call (training/driven.py) ---------------------------------------
    def driven(self) -> bool:
        s = self.s
        return self.driver is not None and s.steps_per_call > 0 and s.fuse_updates and self.st.step >= s.learning_starts

    def driven_call(self) -> None:
        """Env steps and their updates in one call into the compiled graph, until an event is due."""
        if self.st.pending and self.block_due():
            self.run_block()
        self.call_start = self.st.step
        # whether the call goes on past the updates due (a phase a stop cut short: its updates, then the event due)
        self.more = not self.event_due()
        last = self.driver.run(self.source, self.buffer, self.s.batch_size)
        if last is not None:
            self.metrics = last

    def source(self) -> tuple[int, bool]:
        """The driver's source: env steps up to the next update phase, its updates drawn together
        (or one per call, for a buffer of priorities); asks to stop at anything event_due() names
        or after steps_per_call steps, once the phase's updates are done."""
        st, s = self.st, self.s
        while not st.pending:
            st.pending = self.env_step()
            self.more = not self.event_due() and st.step - self.call_start < s.steps_per_call
            if not st.pending and not self.more:
                return 0, False
        if self.block_due():  # the call ends; the loop runs the block and calls again
            return 0, False
        k = self.before_block(st.pending if self.buffer.draws_together else 1)
        st.pending -= k
        return k, self.more or (st.pending > 0 and not self.stop_in_phase())

    def event_due(self) -> bool:
        """Whether the loop has to act between steps now: an evaluation, a log record, a
        checkpoint, the end of the run or a stop request. A driven call returns for these."""
        st, s = self.st, self.s
        return (st.step >= min(st.next_eval, st.next_log, s.total_steps) or self.hooks.stop_requested()
                or 0 < st.next_checkpoint <= st.step)

    # --- records (never from inside a compiled call) -------------------------------------------------
    def log_episodes(self) -> None:
        for step, ret, length in self.episodes:
            self.logger.log("train", step, {"episode_return": ret, "episode_length": length})
        for step, score, length in self.games:
            self.logger.log("train", step, {"game_score": score, "game_length": length})
        self.episodes.clear()
        self.games.clear()

    def log_updates(self) -> None:
        st = self.st
        now = time.perf_counter()
        record = {"steps_per_second": (st.step - self.step_log) / (now - self.t_log), "updates": st.updates}
        if self.metrics is not None:
            record.update({k: float(v) for k, v in self.metrics.items() if np.ndim(v) == 0})
        self.logger.log("update", st.step, record)
        check_finite(record, st.step)  # a loss that is NaN or inf ends the run (Diverged), logged first
        self.t_log, self.step_log = now, st.step
        st.next_log += self.s.log_every


def train(learner: Learner, buffer: Buffer, envs: gym.vector.VectorEnv, eval_env: gym.Env, settings: LoopSettings,
          logger: Logger, state: LoopState | None = None, hooks: LoopHooks | None = None,
          driver: GraphDriver | None = None) -> dict:
    """Run the loop from `state` (a fresh start if None) to `settings.total_steps` env steps.
    Returns a summary; `summary["stopped"]` is True when a stop request ended it early."""
    check_same_step_autoreset(envs)
    state = state if state is not None else initial_state(envs, settings)
    return OffPolicyLoop(learner, buffer, envs, eval_env, settings, logger, state, hooks or LoopHooks(), driver).run()
