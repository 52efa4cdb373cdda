"""Build a run's parts from its composed config: envs, agent, buffer, loggers.

Values that come from the environment (observation size, action bounds) are passed to the
constructors as keyword arguments at the call site; they are never written into the config.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import gymnasium as gym
import numpy as np
from hydra.utils import get_class
from omegaconf import DictConfig, OmegaConf, open_dict

from agents.augment import RandomShift
from agents.base import Agent
from agents.compiled import CompiledAgent
from agents.ga import CompiledPopulation
from agents.ppo.learner import CompiledRollout
from agents.needs import Needs
from buffers.types import Buffer
from envs.factory import check_action_space, make_env, make_vector_env
from networks.normalization import ReturnScaler, RunningNormalizer
from training.config import ConfigError, frame_stack, unshardable, validate
from training.driven import GraphDriver
from training.evolution import EvolutionSettings
from training.fit import check_fit
from training.loop import LoopSettings
from training.rollout import RolloutSettings
from training.parts import build_buffer, check_settings, instantiate_checked
from training.seeding import seed_everything
from training.speed import Speed, apply_threads, configure_devices, decide


@dataclass
class Run:
    """The parts of one run, built from its config (`build_run`)."""

    learner: CompiledAgent | CompiledPopulation | CompiledRollout
    speed: Speed
    buffer: Buffer | None  # None for a population or an on-policy agent (they keep no replay)
    envs: gym.vector.VectorEnv
    eval_env: gym.Env
    rng: np.random.Generator
    settings: LoopSettings | EvolutionSettings | RolloutSettings | None = None  # the family's loop's
    driver: GraphDriver | None = None  # env steps driven from inside the graph (speed.steps_per_call > 0)

    def close(self) -> None:
        self.envs.close()
        self.eval_env.close()


def agent_class(cfg: DictConfig) -> type:
    try:
        return get_class(cfg.agent._target_)
    except Exception as err:  # hydra wraps import errors; name the key that is wrong
        raise ConfigError(f"agent._target_={cfg.agent._target_!r} cannot be imported: {err}") from err


def build_agent(cfg: DictConfig, obs_space: gym.Space, action_space: gym.Space, rng: np.random.Generator) -> Agent:
    """The algorithm of `cfg` (its maths, uncompiled), sized for these spaces."""
    check_network_fits(cfg, obs_space)
    network = network_node(cfg)
    check_settings(network, "network")
    check_settings(cfg.agent, "agent")
    builder = instantiate_checked(network, f"network {network._target_}")  # a partial (mlp), or an object (sale)
    kwargs: dict = {"obs_shape": tuple(int(d) for d in obs_space.shape), "network": builder, "rng": rng}
    if isinstance(action_space, gym.spaces.Box):
        kwargs.update(action_low=action_space.low, action_high=action_space.high)
    else:
        kwargs.update(num_actions=int(action_space.n))
    return instantiate_checked(cfg.agent, f"{cfg.agent._target_} with network {cfg.network._target_}", **kwargs)


def network_name(cfg: DictConfig) -> str:
    return str(cfg.network._target_).rsplit(".", 1)[-1]


def takes_images(cfg: DictConfig) -> bool:
    """Whether the network group is a convolutional one (networks/cnn.py), which takes images."""
    return str(cfg.network._target_).startswith("networks.cnn.")


# network groups that build an encoder for vectors and one for images (H, W, C) alike
EITHER_OBSERVATION = ("agents.mrq.MRQNetworks", "agents.ppo.PPONetworks")


def check_network_fits(cfg: DictConfig, obs_space: gym.Space) -> None:
    """Images (H, W, C) need a convolutional network, vectors a dense one."""
    shape = tuple(obs_space.shape or ())
    if str(cfg.network._target_) in EITHER_OBSERVATION and len(shape) in (1, 3):
        return
    images, cnn = len(shape) == 3, takes_images(cfg)
    if images and not cnn:
        raise ConfigError(
            f"{cfg.env.id} gives image observations of shape {shape}, but the network ({cfg.network._target_}) is a "
            f"dense one, which takes vectors. Use a convolutional one: network=nature_cnn (84x84 frames), "
            f"network=minatar_cnn (MinAtar's 10x10) or network=impala_cnn."
        )
    if cnn and not images:
        raise ConfigError(
            f"the network ({cfg.network._target_}) is a convolutional one, for images (H, W, C), but {cfg.env.id} "
            f"gives observations of shape {shape}. Use a dense network for them (network=mlp), or an env with pixels."
        )
    if not images and len(shape) != 1:
        raise ConfigError(
            f"{cfg.env.id} has observations of shape {shape}; network={network_name(cfg)} takes flat vectors (and "
            f"the convolutional networks, nature_cnn, minatar_cnn and impala_cnn, take images (H, W, C)). Flatten "
            f"them with a wrapper (gymnasium.wrappers.FlattenObservation) or pick an env with vector observations."
        )


def network_node(cfg: DictConfig) -> DictConfig:
    """The network group as its builder takes it: without `obs_norm` and `random_shift`, which
    are the learner's."""
    node = cfg.network.copy()
    with open_dict(node):
        node.pop("obs_norm", None)
        node.pop("random_shift", None)
    return node


AUTO_SHIFT = 4  # DrQ's and MR.Q's pad on 84x84 images


def random_shift(cfg: DictConfig, obs_shape: tuple[int, ...]) -> RandomShift | None:
    """DrQ's random shift of image batches by up to `network.random_shift` pixels (0: none; auto:
    4 on images and none on vectors, as MR.Q's author's `pixel_augs`), its offsets drawn from a
    stream of the run's seed of their own."""
    pad = cfg.network.get("random_shift", 0)
    if pad == "auto":
        pad = AUTO_SHIFT if len(obs_shape) == 3 else 0
    if isinstance(pad, bool) or not isinstance(pad, int) or pad < 0:
        raise ConfigError(f"network.random_shift must be an integer >= 0 (pixels of shift each way; DrQ's is 4 on "
                          f"84x84 images, 0 turns it off) or auto (4 on images, 0 on vectors), got {pad!r}")
    if pad and len(obs_shape) != 3:
        raise ConfigError(f"network.random_shift={pad} shifts images, but this env's observations are vectors of "
                          f"shape {obs_shape}. Set network.random_shift=0.")
    return RandomShift(pad, seed=int(np.random.SeedSequence([int(cfg.seed), 2]).generate_state(1)[0])) if pad else None


def uses_obs_norm(cfg: DictConfig) -> bool:
    value = cfg.network.get("obs_norm", False)  # absent in runs saved before network=simba
    if not isinstance(value, bool):
        raise ConfigError(f"network.obs_norm must be true or false, got {value!r}")
    return value


def decide_speed(cfg: DictConfig, cores: int | None = None) -> Speed:
    """The run's `speed` group with `auto` decided for this machine (or for `cores` cores); no batch
    shards for a network with batch statistics (Batch Renormalization), where they would change
    what it computes."""
    speed = cfg.speed
    if unshardable(cfg.network) and speed.batch_shards == "auto":
        speed = OmegaConf.merge(speed, {"batch_shards": 1})
    return decide(speed, network_widths(cfg.network), int(cfg.batch_size), cores=cores,
                  batch_statistics=cfg.network.get("batch_renorm", False) is True)


def network_widths(network: DictConfig) -> list | None:
    """The hidden widths `auto` judges a network by: an MLP's `hidden`; a SimBa network's widest
    layers, 4 x `width` inside its blocks."""
    if "hidden" in network:
        return network.hidden
    if "width" in network:
        return [network.width, 4 * network.width]
    return None


def build_learner(cfg: DictConfig, obs_space: gym.Space, action_space: gym.Space, rng: np.random.Generator,
                  speed: Speed | None = None) -> CompiledAgent:
    """The agent of `cfg`, its update compiled with the run's speed settings."""
    speed = speed or decide_speed(cfg)
    agent = build_agent(cfg, obs_space, action_space, rng)
    if uses_obs_norm(cfg) and len(agent.obs_shape) != 1:
        raise ConfigError("network.obs_norm=true keeps running statistics of vector observations; images are scaled "
                          "by 1/255 in the network. Set network.obs_norm=false.")
    obs_norm = RunningNormalizer(agent.obs_shape[0]) if uses_obs_norm(cfg) else None
    if agent.needs.rollout is not None:  # CleanRL's and SB3's PPO clip normalized observations and rewards at 10
        scaler = ReturnScaler(int(cfg.num_envs), float(cfg.gamma)) if agent.needs.rollout.normalize_reward else None
        return CompiledRollout(agent, compile=speed.compile, reward_scaler=scaler,
                               obs_norm=RunningNormalizer(agent.obs_shape[0], clip=10.0) if obs_norm else None)
    if agent.needs.population:
        try:
            return CompiledPopulation(agent, compile=speed.compile, numpy_acting=speed.numpy_acting, obs_norm=obs_norm)
        except ValueError as err:  # a network the population cannot run batched
            raise ConfigError(str(err)) from err
    return CompiledAgent(agent, compile=speed.compile, update_precision=speed.update_precision,
                         batch_shards=speed.batch_shards, numpy_acting=speed.numpy_acting, obs_norm=obs_norm,
                         random_shift=random_shift(cfg, agent.obs_shape))


def describe(cfg: DictConfig) -> dict:
    """What a checkpoint must match to be restored into a run built from `cfg`."""
    return {
        "agent": cfg.agent._target_,
        "network": OmegaConf.to_container(cfg.network, resolve=True),
        "env_id": cfg.env.id,
    }


def eval_env_args(cfg: DictConfig) -> dict:
    """Time limit and kwargs of evaluation episodes: `env.eval_max_episode_steps` when set, and
    `env.eval_kwargs` over `env.kwargs`."""
    limit = cfg.env.get("eval_max_episode_steps") or cfg.env.max_episode_steps
    kwargs = {**cfg.env.kwargs, **cfg.env.get("eval_kwargs", {})}  # Atari's: whole games, unclipped scores
    return dict(max_episode_steps=limit, kwargs=kwargs, frame_stack=frame_stack(cfg))


def build_run(cfg: DictConfig, with_buffer: bool = True) -> Run:
    validate(cfg)
    speed = decide_speed(cfg)
    apply_threads(cfg.speed, speed)
    configure_devices()
    rng = seed_everything(int(cfg.seed), deterministic=bool(cfg.deterministic))
    cls = agent_class(cfg)
    env_args = dict(max_episode_steps=cfg.env.max_episode_steps, kwargs=cfg.env.kwargs, frame_stack=frame_stack(cfg))
    eval_env = make_env(cfg.env.id, seed=eval_seed(cfg), **eval_env_args(cfg))
    check_action_space(eval_env.action_space, cls.ACTION_KIND, cfg.env.id, cls.__name__)
    if eval_epsilon(cfg) and not isinstance(eval_env.action_space, gym.spaces.Discrete):
        raise ConfigError(f"eval_epsilon={eval_epsilon(cfg):g} takes random actions in evaluation, which is for discrete "
                          f"actions (the Atari protocol); {cfg.env.id}'s are continuous. Set eval_epsilon=0.")
    if (cls.needs.population or cls.needs.rollout is not None) and (
            get_class(cfg.buffer._target_) is not get_class("buffers.uniform.UniformReplay")):
        why = "a population is scored on its own episodes" if cls.needs.population else "it learns from its own rollouts"
        raise ConfigError(
            f"{cls.__name__} keeps no replay buffer ({why}), so buffer={cfg.buffer._target_.rsplit('.', 1)[-1]} "
            f"would have nothing to act on; leave the buffer group out of the command."
        )
    if cls.needs.rollout is not None:
        envs = make_vector_env(cfg.env.id, int(cfg.num_envs), seed=int(cfg.seed), vectorization=speed.vectorization,
                               **env_args)
        learner = build_learner(cfg, envs.single_observation_space, envs.single_action_space, rng, speed)
        return Run(learner=learner, speed=speed, buffer=None, envs=envs, eval_env=eval_env, rng=rng,
                   settings=rollout_settings(cfg, learner.agent.needs.rollout))
    if cls.needs.population:  # one env per individual, no replay buffer
        learner = build_learner(cfg, eval_env.observation_space, eval_env.action_space, rng, speed)
        envs = make_vector_env(cfg.env.id, learner.agent.population, seed=int(cfg.seed),
                               vectorization=speed.vectorization, **env_args)
        return Run(learner=learner, speed=speed, buffer=None, envs=envs, eval_env=eval_env, rng=rng,
                   settings=population_settings(cfg, learner.agent.episodes))
    envs = make_vector_env(
        cfg.env.id, int(cfg.num_envs), seed=int(cfg.seed), vectorization=speed.vectorization, **env_args
    )
    obs_space, action_space = envs.single_observation_space, envs.single_action_space
    learner = build_learner(cfg, obs_space, action_space, rng, speed)
    if speed.steps_per_call and not learner.agent.acting.in_numpy:
        # The driver acts from inside its numpy_function, which holds one of TF's inter-op threads: a
        # network that acts through TF (a dueling head) would wait there, for ever with one such thread.
        speed = replace(speed, steps_per_call=0)
    buffer = (build_buffer(cfg, obs_space, action_space, rng, learner.replay.mask_horizon) if with_buffer
              else None)
    settings = loop_settings(cfg, speed, learner.agent.needs)
    check_fit(settings, learner.agent.needs, buffer)
    driver = GraphDriver(learner) if speed.steps_per_call > 0 and speed.fuse_updates else None
    return Run(learner=learner, speed=speed, buffer=buffer, envs=envs, eval_env=eval_env, rng=rng, settings=settings,
               driver=driver)


def eval_epsilon(cfg: DictConfig) -> float:
    """The chance of a random action in evaluation (0: greedy; absent in runs saved before it existed)."""
    value = cfg.get("eval_epsilon", 0.0)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
        raise ConfigError(f"eval_epsilon must be a number in [0, 1] (0.05 in the Atari papers), got {value!r}")
    return float(value)


def eval_seed(cfg: DictConfig) -> int:
    """The evaluation env's seed: apart from every training env's (seed .. seed + num_envs - 1)."""
    return int(cfg.seed) + max(100, int(cfg.num_envs))


def population_settings(cfg: DictConfig, episodes: int) -> EvolutionSettings:
    return EvolutionSettings(
        total_steps=int(cfg.total_steps), episodes=episodes, eval_every=int(cfg.eval_every),
        eval_episodes=int(cfg.eval_episodes), seed=int(cfg.seed), eval_seed=eval_seed(cfg),
        checkpoint_every=int(cfg.checkpoint.every), progress=bool(cfg.logger.progress))


def rollout_settings(cfg: DictConfig, rollout) -> RolloutSettings:
    """The on-policy loop's settings; a rollout of steps x envs that the minibatches do not divide is refused."""
    batch = rollout.steps * int(cfg.num_envs)
    if batch % rollout.minibatches:
        raise ConfigError(f"a rollout of agent.n_steps={rollout.steps} x num_envs={cfg.num_envs} = {batch} samples does not "
                          f"split into agent.num_minibatches={rollout.minibatches} equal minibatches; choose values whose "
                          f"product the number of minibatches divides (CleanRL: 2048 x 1 in 32; 128 x 4 in 4).")
    return RolloutSettings(
        total_steps=int(cfg.total_steps), steps=rollout.steps, gamma=float(cfg.gamma), gae_lambda=rollout.gae_lambda,
        bootstrap_truncation=rollout.bootstrap_truncation, eval_every=int(cfg.eval_every),
        eval_episodes=int(cfg.eval_episodes), seed=int(cfg.seed), eval_seed=eval_seed(cfg),
        eval_epsilon=eval_epsilon(cfg), checkpoint_every=int(cfg.checkpoint.every), progress=bool(cfg.logger.progress))


def loop_settings(cfg: DictConfig, speed: Speed, needs: Needs) -> LoopSettings:
    """The loop's settings, read from the config once, with what the agent declares it needs."""
    at_episode_ends = cfg.get("train_at_episode_ends", False)  # absent in runs saved before it existed
    if not isinstance(at_episode_ends, bool):
        raise ConfigError(f"train_at_episode_ends must be true or false, got {at_episode_ends!r}.")
    return LoopSettings(
        total_steps=int(cfg.total_steps),
        learning_starts=int(cfg.learning_starts),
        batch_size=int(cfg.batch_size),
        updates_per_step=float(cfg.updates_per_step),
        eval_every=int(cfg.eval_every),
        eval_episodes=int(cfg.eval_episodes),
        log_every=int(cfg.logger.every),
        seed=int(cfg.seed),
        eval_seed=eval_seed(cfg),
        eval_epsilon=eval_epsilon(cfg),
        checkpoint_every=int(cfg.checkpoint.every),
        train_every=int(cfg.train_every),
        fuse_updates=speed.fuse_updates,
        steps_per_call=speed.steps_per_call,
        progress=bool(cfg.logger.progress),
        num_envs=int(cfg.num_envs),
        train_at_episode_ends=at_episode_ends or needs.policy_checkpoints is not None,
        policy_checkpoints=needs.policy_checkpoints,
    )
