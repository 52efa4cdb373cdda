"""The loop of population-based agents (agents/ga/): generations instead of updates.

Each generation, the whole population runs in one gymnasium vector env (one env per individual):
every env step is one compiled call that acts for all individuals together, and individuals that
have finished their episodes are masked out until the slowest is done. The mean return over an
individual's episodes is its fitness; the agent then breeds the next generation. The loop knows
the family (`population_act`, `evolve`, `observe`, `act`), never the algorithm; evaluation,
logging, checkpoints and stopping are every loop's (training/session.py), at generation boundaries.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Protocol

import gymnasium as gym
import numpy as np
import tensorflow as tf

from training.faults import check_finite
from training.loggers import Logger
from training.session import Evaluation, LoopHooks, Session


class PopulationLearner(Protocol):
    """What the loop drives (`agents.ga.CompiledPopulation`)."""

    def population_act(self, obs: np.ndarray) -> np.ndarray: ...
    def evolve(self, fitness: np.ndarray) -> None: ...
    def observe(self, obs: np.ndarray) -> None: ...
    def act(self, obs: np.ndarray, explore: bool) -> np.ndarray: ...


@dataclass(frozen=True)
class EvolutionSettings:
    total_steps: int  # env steps of the individuals' episodes, summed; the run ends at the first generation past it
    episodes: int  # per individual per generation
    eval_every: int  # env steps between evaluations of the best individual (checked at generation ends)
    eval_episodes: int
    seed: int
    eval_seed: int
    checkpoint_every: int = 0
    progress: bool = True


@dataclass
class EvolutionState:
    """What the loop carries from one generation to the next; saved in checkpoints."""

    step: int = 0
    generation: int = 0
    next_eval: int = 0
    next_checkpoint: int = 0
    best_return: float = -np.inf
    best_fitness: float = -np.inf
    last_eval: dict | None = None
    wall_time: float = 0.0
    evals: list = field(default_factory=list)


@dataclass
class GenerationResult:
    fitness: np.ndarray  # (P,) mean episode return of each individual
    steps: int  # env steps of the episodes counted (masked steps excluded)
    vector_steps: int  # steps of the vector env (one population_act call each)
    act_seconds: float | None = None  # in the population's forward calls (None: not measured apart)
    env_seconds: float | None = None  # in the vector env's steps


def run_generation(population: PopulationLearner, envs: gym.vector.VectorEnv, episodes: int, reset_seed: int) -> GenerationResult:
    """`episodes` episodes of every individual, individual p in env p. All envs start from the
    same seed, so every individual meets the same initial states (common random numbers: fitness
    differences are the policies', not the draws'). A finished env's next episode starts in the
    same step (same-step autoreset); an individual done with its episodes is masked out (its env
    still steps, its rewards no longer count) until the last is done."""
    size = envs.num_envs
    obs, _ = envs.reset(seed=[reset_seed] * size)
    returns, finished, steps, vector_steps = np.zeros(size), np.zeros(size, np.int64), 0, 0
    act_seconds = env_seconds = 0.0
    running = np.ones(size, bool)
    while running.any():
        population.observe(obs[running])
        t0 = time.perf_counter()
        action = population.population_act(obs)
        t1 = time.perf_counter()
        obs, reward, terminated, truncated, _ = envs.step(action)
        env_seconds += time.perf_counter() - t1
        act_seconds += t1 - t0
        returns += np.where(running, reward, 0.0)
        steps += int(running.sum())
        vector_steps += 1
        finished += (terminated | truncated) & running
        running = finished < episodes
    return GenerationResult(returns / episodes, steps, vector_steps, act_seconds, env_seconds)


def generation_in_graph(population_act: Callable, step: Callable, state_dim: int, time_limit: int, population: int,
                        jit_compile: bool = False) -> Callable:
    """A whole generation as one compiled call, for an env whose dynamics are TensorFlow
    (envs/cartpole_tf.py): `f(starts)` with start states (episodes, state_dim) float64 returns (fitness
    (P,), env steps counted, steps of the population) as `run_generation` does for a vector env
    whose envs all reset to those states, with the same masking. `step(state, action)` returns
    (next state, reward, terminated); an episode is truncated after `time_limit` steps."""

    def generation(starts: tf.Tensor):
        episodes = tf.shape(starts)[0]
        state = tf.tile(starts[:1], [population, 1])
        zeros = tf.zeros([population], tf.int32)

        def body(state, episode, t, returns, steps, vector_steps):
            running = episode < episodes
            action = population_act(tf.cast(state, tf.float32))
            state, reward, terminated = step(state, action)
            t = t + 1
            done = (terminated | (t >= time_limit)) & running
            returns += tf.where(running, reward, tf.zeros_like(reward))
            steps += tf.reduce_sum(tf.cast(running, tf.int32))
            episode += tf.cast(done, tf.int32)
            # an env done with an episode starts the next one, from that episode's start state
            state = tf.where(done[:, None], tf.gather(starts, tf.minimum(episode, episodes - 1)), state)
            return state, episode, tf.where(done, 0, t), returns, steps, vector_steps + 1

        _, _, _, returns, steps, vector_steps = tf.while_loop(
            lambda state, episode, *_: tf.reduce_any(episode < episodes), body,
            (state, zeros, zeros, tf.zeros([population], tf.float64), tf.constant(0), tf.constant(0)))
        return returns / tf.cast(episodes, tf.float64), steps, vector_steps

    compiled = tf.function(generation, input_signature=[tf.TensorSpec([None, state_dim], tf.float64)],
                           jit_compile=jit_compile, autograph=False)
    return compiled


def initial_evolution_state(settings: EvolutionSettings) -> EvolutionState:
    return EvolutionState(next_checkpoint=settings.checkpoint_every or -1)


def train_population(population: PopulationLearner, generation: Callable[[int], GenerationResult], eval_env: gym.Env,
                     settings: EvolutionSettings, logger: Logger, rng: np.random.Generator,
                     state: EvolutionState | None = None, hooks: LoopHooks | None = None) -> dict:
    """Generations from `state` until `settings.total_steps` env steps; a summary with the keys of
    the off-policy loop's (`final_return`, `best_return`, ...) and `generations`. `generation(seed)`
    scores the population from start states drawn with `seed`: `run_generation` on a vector env, or
    a `generation_in_graph` call."""
    s = settings
    st = state if state is not None else initial_evolution_state(s)
    session = Session(st, s.total_steps, Evaluation(population, eval_env, s.eval_every, s.eval_episodes, s.eval_seed),
                      s.checkpoint_every, logger, hooks, s.progress)
    while st.step < s.total_steps:
        t0 = time.perf_counter()
        # the generation's start states: a draw of the run's generator, so a resumed run draws the same
        result = generation(int(rng.integers(2**31 - 1)))
        population.evolve(result.fitness)
        seconds = time.perf_counter() - t0
        session.advance(result.steps)
        st.generation += 1
        st.best_fitness = max(st.best_fitness, float(result.fitness.max()))
        record = generation_record(result, seconds, st.generation)
        logger.log("train", st.step, record)
        check_finite(record, st.step)  # a NaN fitness (an env that returned NaN rewards) ends the run

        if st.step >= st.next_eval and st.step < s.total_steps:
            while st.next_eval <= st.step:
                st.next_eval += s.eval_every
            session.evaluate(generation=st.generation)
        if session.stop_requested():
            break
        if session.checkpoint_due():
            session.periodic_checkpoint()
    return {**session.finish(generation=st.generation), "generations": st.generation, "best_fitness": st.best_fitness}


def generation_record(result: GenerationResult, seconds: float, generation: int) -> dict:
    """A generation's `train` record: its fitness, and how fast it ran."""
    fitness = result.fitness
    record = {
        "generation": generation,
        "fitness_best": float(fitness.max()),
        "fitness_mean": float(fitness.mean()),
        "fitness_median": float(np.median(fitness)),
        "fitness_std": float(fitness.std()),
        "generations_per_second": 1.0 / seconds,
        "steps_per_second": result.steps / seconds,
    }
    if result.act_seconds is not None:  # per step of the whole population: its forward call, its envs' step
        record["act_ms_per_step"] = 1e3 * result.act_seconds / result.vector_steps
        record["env_ms_per_step"] = 1e3 * result.env_seconds / result.vector_steps
    return record
