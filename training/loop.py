"""The off-policy training loop. It drives any agent through the Learner protocol and never knows
which algorithm it is; checkpointing and stopping reach it as callbacks. With a `GraphDriver`
(training/driven.py) the env steps between events run from inside one compiled call."""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

import gymnasium as gym
import numpy as np
from tqdm.auto import tqdm

from agents.base import Learner
from agents.needs import PolicyCheckpoints
from buffers.types import Buffer
from envs.factory import finished_games, transition_next_obs
from training.assessment import Assessment, assess
from training.driven import GraphDriver
from training.evaluation import evaluate
from training.faults import check_finite
from training.loggers import Logger


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


@dataclass
class LoopHooks:
    """How the outside world takes part: `checkpoint(state, kind)` with kind periodic|best|stop|final,
    and `stop_requested()` polled once per iteration (a signal arrived)."""

    checkpoint: Callable[[LoopState, str], None] = lambda state, kind: None
    stop_requested: Callable[[], bool] = lambda: False


def initial_state(envs: gym.vector.VectorEnv, settings: LoopSettings) -> LoopState:
    obs, _ = envs.reset(seed=settings.seed)
    return LoopState(obs=obs, next_log=settings.log_every, next_checkpoint=settings.checkpoint_every or -1)


def train(
    learner: Learner,
    buffer: Buffer,
    envs: gym.vector.VectorEnv,
    eval_env: gym.Env,
    settings: LoopSettings,
    logger: Logger,
    state: LoopState | None = None,
    hooks: LoopHooks | None = None,
    driver: GraphDriver | None = None,
) -> dict:
    """Run the loop from `state` (a fresh start if None) to `settings.total_steps` env steps.
    Returns a summary; `summary["stopped"]` is True when a stop request ended it early."""
    s, hooks = settings, hooks or LoopHooks()
    st = state if state is not None else initial_state(envs, s)
    num_envs = envs.num_envs
    metrics = None
    # disable=None: the bar shows on a terminal and stays out of redirected logs
    bar = tqdm(total=s.total_steps, initial=st.step, disable=None if s.progress else True,
               unit="step", dynamic_ncols=True, smoothing=0.05)
    t_start = time.perf_counter()
    wall_before = st.wall_time
    t_log, step_log = t_start, st.step
    episodes: list[tuple[int, float, int]] = []  # (step, return, length) of episodes not yet logged
    games: list[tuple[int, float, int]] = []  # (step, score, length) of games, where they are not episodes

    def run_eval() -> None:
        result = evaluate(learner, eval_env, s.eval_episodes, seed=s.eval_seed, epsilon=s.eval_epsilon)
        st.last_eval = result
        st.evals.append((st.step, result["return_mean"]))
        logger.log("eval", st.step, {**result, "wall_time": wall_before + time.perf_counter() - t_start})
        bar.set_postfix(eval_return=f"{result['return_mean']:.1f}")
        if result["return_mean"] > st.best_return:
            st.best_return = result["return_mean"]
            hooks.checkpoint(st, "best")

    def episode_end(ret: float) -> bool:
        """A training episode's end, past the first: whether the updates due train now."""
        if s.policy_checkpoints is None:
            return True
        state, train_now, keep = assess(Assessment(*st.assessment), ret, s.policy_checkpoints, st.updates,
                                        int(st.updates_due + 1e-9))
        st.assessment = tuple(state)
        if keep:
            learner.keep_policy()
        return train_now

    def env_step() -> int:
        """One step of every env: act, step, store, count the updates due. Returns how many
        updates are due now (0 outside an update phase)."""
        at_episode_ends = s.train_at_episode_ends
        learning = st.policy_acts if at_episode_ends else st.step >= s.learning_starts  # sfujim/TD3: t >= start_timesteps
        learner.observe(st.obs)  # random steps too: running statistics count every observation
        action = learner.act(st.obs, explore=True) if learning else envs.action_space.sample()
        next_obs, reward, terminated, truncated, infos = envs.step(action)
        done = terminated | truncated
        buffer.add(st.obs, action, reward, transition_next_obs(next_obs, infos, done), terminated, truncated)
        st.obs = next_obs
        st.step += num_envs
        bar.update(num_envs)
        if learning:
            st.updates_due += num_envs * s.updates_per_step
        train_now = not at_episode_ends and st.step % s.train_every < num_envs
        if "episode" in infos:
            for i in np.flatnonzero(infos["_episode"]):
                ret, length = float(infos["episode"]["r"][i]), int(infos["episode"]["l"][i])
                episodes.append((st.step, ret, length))
                if at_episode_ends and st.policy_acts:
                    train_now |= episode_end(ret)
                elif at_episode_ends and st.step > s.learning_starts:
                    st.policy_acts = True
        games.extend((st.step, score, length) for score, length in finished_games(infos, done))
        if not learning or not train_now:
            return 0
        # The sum of a ratio such as 0.1 or 0.3 falls a float rounding short of a whole update
        # (ten 0.1s add up to 0.9999999999999999); the tolerance counts it, so no update comes late.
        n = int(st.updates_due + 1e-9)
        st.updates_due -= n
        st.updates += n
        return n

    block = learner.block

    def block_due() -> bool:
        """Whether the agent's block comes before the next update (its every-th, the first included)."""
        return block is not None and st.blocks <= (st.updates - st.pending) // block.every

    def run_block() -> None:
        """The agent's block: its draws from the buffer as it is now, as many per call as fit."""
        for i, k in enumerate(learner.block_chunks(s.batch_size)):
            learner.run_block(block.replay.draw(buffer, s.batch_size, k), start=i == 0)
        st.blocks += 1

    def before_block(k: int) -> int:
        """k updates capped at those before the next block."""
        if block is None:
            return k
        done = st.updates - st.pending
        return min(k, (done // block.every + 1) * block.every - done)

    def event_due() -> bool:
        """Whether the loop has to act between steps now: an evaluation, a log record, a
        checkpoint, the end of the run or a stop request. A driven call returns for these."""
        return (st.step >= min(st.next_eval, st.next_log, s.total_steps) or hooks.stop_requested()
                or 0 < st.next_checkpoint <= st.step)

    def source(td_error: np.ndarray | None):
        """The driver's source: env steps up to the next update phase, its batches drawn together
        (or one per call, for a buffer of priorities); asks to stop at anything event_due() names
        or after steps_per_call steps, once the phase's updates are done."""
        nonlocal more
        if td_error is not None:
            buffer.update_priorities(td_error)
        while not st.pending:
            st.pending = env_step()
            more = not event_due() and st.step - call_start < s.steps_per_call
            if not st.pending and not more:
                return None, False
        if block_due():  # the call ends; the loop runs the block and calls again
            return None, False
        k = before_block(st.pending if buffer.draws_together else 1)
        st.pending -= k
        return learner.replay.draw(buffer, s.batch_size, k), more or (st.pending > 0 and not stop_in_phase())

    def stop_in_phase() -> bool:
        """Whether a stop request ends the current update phase before its last update. Not in the
        run's last phase, which a stopped run would otherwise leave undone at total_steps."""
        return st.step < s.total_steps and hooks.stop_requested()

    # fused: a phase's updates in one call, their batches drawn together unless the buffer's priorities
    # must come back between them (prioritized replay: one batch per call)
    fused = s.fuse_updates and buffer.draws_together
    stopped = False
    while st.step < s.total_steps or st.pending:  # pending at the end: a driven call ended for a block
        if st.step >= st.next_eval and not st.pending:  # after the phase a stop cut short, as without the stop
            st.next_eval += s.eval_every
            run_eval()

        if driver is not None and s.steps_per_call > 0 and s.fuse_updates and st.step >= s.learning_starts:
            # many steps and their updates in one call into the compiled graph
            if st.pending and block_due():
                run_block()
            call_start = st.step
            # the source's `more`: whether the call goes on past the updates due (a phase a stop cut
            # short: its updates, then the event due)
            more = not event_due()
            last = driver.run(source)
            if last is not None:
                metrics = last
                if "td_error" in metrics:  # the last batches' errors, which the source has not had
                    buffer.update_priorities(metrics["td_error"])
        else:
            if not st.pending:
                st.pending = env_step()
            while st.pending:
                if block_due():
                    run_block()
                k = before_block(st.pending if fused else 1)
                metrics = learner.update(learner.replay.draw(buffer, s.batch_size, k))
                buffer.update_priorities(metrics.get("td_error"))
                st.pending -= k
                if st.pending and stop_in_phase():
                    break
        for step, ret, length in episodes:  # logged here: never from inside a compiled call
            logger.log("train", step, {"episode_return": ret, "episode_length": length})
        for step, score, length in games:
            logger.log("train", step, {"game_score": score, "game_length": length})
        episodes.clear()
        games.clear()

        if st.step >= st.next_log:
            now = time.perf_counter()
            record = {"steps_per_second": (st.step - step_log) / (now - t_log), "updates": st.updates}
            if metrics is not None:
                record.update({k: float(v) for k, v in metrics.items() if np.ndim(v) == 0})
            logger.log("update", st.step, record)
            check_finite(record, st.step)  # a loss that is NaN or inf ends the run (Diverged), logged first
            t_log, step_log = now, st.step
            st.next_log += s.log_every

        if hooks.stop_requested() and st.step < s.total_steps:  # at the end, finish: eval, summary
            stopped = True
            break
        if 0 < st.next_checkpoint <= st.step and st.step < s.total_steps:
            st.next_checkpoint += s.checkpoint_every
            st.wall_time = wall_before + time.perf_counter() - t_start
            check_finite(metrics, st.step)
            hooks.checkpoint(st, "periodic")

    if not stopped:
        run_eval()
        while st.next_eval <= st.step:  # an extended run does not evaluate this step again
            st.next_eval += s.eval_every
    bar.close()
    st.wall_time = wall_before + time.perf_counter() - t_start
    hooks.checkpoint(st, "stop" if stopped else "final")
    return {
        "stopped": stopped,
        "steps": st.step,
        "updates": st.updates,
        "final_return": st.last_eval["return_mean"] if st.last_eval else float("nan"),
        **({"final_success_rate": st.last_eval["success_rate"]} if st.last_eval and "success_rate" in st.last_eval else {}),
        "best_return": st.best_return,
        "wall_time": st.wall_time,
        "steps_per_second": st.step / st.wall_time if st.wall_time > 0 else float("nan"),
    }
