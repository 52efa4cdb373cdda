"""The families of agents the one runner trains (training/runner.py), and what differs between them:
the loop, the state it carries, what a checkpoint holds beside the weights and generators, and
what resuming puts back. An off-policy learner (training/loop.py) keeps a replay buffer and its
envs mid-episode; a population (training/evolution.py, `Needs.population`) keeps neither, its envs
reseeded every generation; an on-policy learner (training/rollout.py, `Needs.rollout`) keeps its
envs mid-episode but no rollout between updates. Building, restoring, logging, checkpointing and stopping are the
runner's, alike for both."""
from __future__ import annotations

from typing import Callable

import gymnasium as gym
from omegaconf import DictConfig

from agents.ga import CompiledPopulation
from envs.state import EnvStateError, env_state, set_env_state
from training.builder import Run
from training.checkpoints import CheckpointError
from training.config import ConfigError, frame_stack
from training.evolution import EvolutionState, GenerationResult, generation_in_graph, run_generation, train_population
from training.loggers import Logger
from training.loop import LoopState, initial_state, train
from training.rollout import RolloutState, initial_rollout_state, train_on_policy
from training.session import LoopHooks
from training.speed import Speed


def restore_envs(envs: gym.vector.VectorEnv, saved, state, seed: int, path: str, console: Callable[[str], None]) -> bool:
    """The training envs mid-episode as the checkpoint holds them; False when it holds none (async
    vectorization), and they restart from a fresh reset."""
    if saved is None:
        console("warning: the training envs could not be saved (async vectorization); they restart from a fresh reset.")
        state.obs, _ = envs.reset(seed=seed + state.step)
        return False
    try:
        set_env_state(envs, saved)
    except EnvStateError as err:
        raise CheckpointError(f"checkpoint {path} holds training envs that do not fit this run's: {err}") from err
    return True


class OffPolicy:
    state_type = LoopState
    stepped_records = ("train", "update")  # records cut at the resumed step (evaluations: by count)
    weights = "agent's weights or optimizer state"

    def __init__(self, cfg: DictConfig, run: Run):
        self.cfg, self.run = cfg, run

    def describe(self, speed: dict) -> str:
        line = "update: " + ", ".join(f"{k} {v}" for k, v in speed.items()) + " (0: TF's default)"
        shape = self.run.envs.single_observation_space.shape
        if len(shape) != 3:
            return line
        # the frame stack and the shift as resolved (env.frame_stack: null, network.random_shift: auto)
        shift = self.run.learner.random_shift
        return (f"{line}\nimages: {'x'.join(map(str, shape))}, {frame_stack(self.cfg)} frames stacked; "
                f"random shift {shift.pad if shift else 0}")

    def initial_state(self) -> LoopState:
        return initial_state(self.run.envs, self.run.settings)

    def position(self, state: LoopState) -> str:
        return f"step {state.step}"

    def restore(self, state: LoopState, saved: dict, buffer_state: dict | None, path: str,
                console: Callable[[str], None]) -> None:
        """The replay buffer and the training envs, mid-episode, as the checkpoint holds them."""
        run = self.run
        if buffer_state is not None:
            try:
                run.buffer.load_state_dict(buffer_state)
            except (ValueError, KeyError) as err:
                raise CheckpointError(f"checkpoint {path} holds a replay buffer that does not fit this run's: {err}") from err
        else:
            console(f"warning: {path} holds no replay buffer (checkpoint.buffer=false); resuming with an empty one.")
        if not restore_envs(run.envs, saved["envs"], state, int(self.cfg.seed), path, console):
            run.buffer.cut_episodes()  # the episodes under way end at the reset

    def envs_state(self):
        return env_state(self.run.envs)

    def buffer_state(self) -> dict | None:
        return self.run.buffer.state_dict()

    def train(self, logger: Logger, state: LoopState, hooks: LoopHooks) -> dict:
        run = self.run
        return train(run.learner, run.buffer, run.envs, run.eval_env, run.settings, logger, state, hooks, run.driver)


class Population:
    state_type = EvolutionState
    stepped_records = ("train",)
    weights = "population's weights"

    def __init__(self, cfg: DictConfig, run: Run):
        self.run = run
        self.generation, self.how = population_generation(cfg, run.learner, run.envs, run.speed)

    def describe(self, speed: dict) -> str:
        return f"generations: {self.how}"

    def initial_state(self) -> EvolutionState:
        return EvolutionState(next_checkpoint=self.run.settings.checkpoint_every or -1)

    def position(self, state: EvolutionState) -> str:
        return f"generation {state.generation} (step {state.step})"

    def restore(self, state, saved, buffer_state, path, console) -> None:
        """Nothing beside the weights and generators: each generation reseeds the envs."""

    def envs_state(self):
        return None

    def buffer_state(self) -> dict | None:
        return None

    def train(self, logger: Logger, state: EvolutionState, hooks: LoopHooks) -> dict:
        run = self.run
        return train_population(run.learner, self.generation, run.eval_env, run.settings, logger, run.rng, state, hooks)


class OnPolicy:
    state_type = RolloutState
    stepped_records = ("train", "update")
    weights = "agent's weights or optimizer state"

    def __init__(self, cfg: DictConfig, run: Run):
        self.cfg, self.run = cfg, run

    def describe(self, speed: dict) -> str:
        s, n = self.run.settings, self.run.envs.num_envs
        return (f"rollouts: {s.steps} steps x {n} envs, one compiled update each ({speed['compile']}); "
                f"{s.iterations(n)} rollouts")

    def initial_state(self) -> RolloutState:
        return initial_rollout_state(self.run.envs, self.run.settings)

    def position(self, state: RolloutState) -> str:
        return f"rollout {state.iteration} (step {state.step})"

    def restore(self, state, saved, buffer_state, path, console) -> None:
        """The training envs, mid-episode, as the checkpoint holds them (a checkpoint holds no rollout)."""
        restore_envs(self.run.envs, saved["envs"], state, int(self.cfg.seed), path, console)

    def envs_state(self):
        return env_state(self.run.envs)

    def buffer_state(self) -> dict | None:
        return None

    def train(self, logger: Logger, state: RolloutState, hooks: LoopHooks) -> dict:
        run = self.run
        return train_on_policy(run.learner, run.envs, run.eval_env, run.settings, logger, state, hooks)


def family_of(cfg: DictConfig, run: Run) -> OffPolicy | Population | OnPolicy:
    needs = run.learner.agent.needs
    if needs.rollout is not None:
        return OnPolicy(cfg, run)
    return Population(cfg, run) if needs.population else OffPolicy(cfg, run)


def population_generation(cfg: DictConfig, learner: CompiledPopulation, envs: gym.vector.VectorEnv,
                          speed: Speed) -> tuple[Callable, str]:
    """How a population's generations run (`training.evolution`): on the vector env, a compiled
    call per step; or, with `speed.env_in_graph` where the env's dynamics exist in TensorFlow, a
    whole generation as one XLA-compiled call (the same fitness, tested). Returns
    (generation(seed) -> GenerationResult, a description for the console)."""
    from envs.cartpole_tf import graph_env

    choice = cfg.speed.get("env_in_graph", "auto")  # absent in runs saved before it existed
    agent = learner.agent
    dynamics = graph_env(cfg.env.id, cfg.env.max_episode_steps, cfg.env.kwargs)
    problem = None
    if dynamics is None:
        problem = f"{cfg.env.id} (as configured) has no dynamics in TensorFlow; CartPole-v1 with its own time limit has"
    elif learner.obs_norm is not None:
        problem = "network.obs_norm updates its statistics in Python from every step's observations"
    if problem is not None and choice is True:
        raise ConfigError(f"speed.env_in_graph=true cannot run this generation in one call: {problem}. "
                          f"Set speed.env_in_graph=auto to run it on the vector env.")
    if problem is not None or choice is False:
        return (lambda seed: run_generation(learner, envs, agent.episodes, seed)), "vector env, one call per step"
    run = generation_in_graph(agent.population_act, dynamics.step, dynamics.state_dim, dynamics.time_limit,
                              agent.population, jit_compile=speed.compile != "eager")

    def generation(seed: int) -> GenerationResult:
        fitness, steps, vector_steps = run(dynamics.start_states(seed, agent.episodes))
        return GenerationResult(fitness.numpy(), int(steps), int(vector_steps))

    return generation, "the whole generation in one compiled call (speed.env_in_graph)"
