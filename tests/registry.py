"""Every agent of conf/agent/, once, as the cross-agent tests build and drive it.

Adding an agent is one entry in AGENTS: the contract tests (tests/test_agents.py), the compile
modes and fused updates, the GPU kernels (tests/test_gpu_ready.py), the golden runs
(tests/test_golden.py) and the command line's list of choices read it. tests/test_registry.py fails
while a conf/agent yaml has no entry, or an entry builds another class than its yaml names.

An entry's agent is tiny and on the tests' spaces: OBS-dimensional observations and either the box
[LOW, HIGH] or NUM_ACTIONS discrete actions.
"""
from __future__ import annotations

import dataclasses
import functools
import importlib
from typing import Any, Callable

import numpy as np

from helpers import random_batch

OBS = 5
LOW, HIGH = np.array([-1.0, 0.0]), np.array([1.0, 3.0])
NUM_ACTIONS = 3


@dataclasses.dataclass(frozen=True)
class AgentEntry:
    name: str  # conf/agent/<name>.yaml
    build: Callable[..., Any]  # (rng, **settings) -> a tiny agent
    # (rng, agent, n) -> one update's inputs for n samples; None: the agent takes no gradient updates (the GA)
    inputs: Callable[..., Any] | None
    golden: dict[str, list[str]]  # golden case -> the overrides of its run, beside tests/test_golden.py's COMMON
    discrete: bool = False
    compare: tuple[str, ...] = ("eager",)  # compile modes whose updates equal graph mode's
    fused: tuple[str, ...] = ("graph",)  # modes in which K updates in one call equal K calls
    xla_settings: dict = dataclasses.field(default_factory=dict)  # what makes XLA comparable with graph mode
    speeds: tuple[str, ...] = ("plain", "shards_bf16")  # the speed settings its update is built with on a GPU
    rollouts: bool = False  # learns from its own rollouts (training/rollout.py), not from replay

    @property
    def updates(self) -> bool:
        return self.inputs is not None


def net(hidden=(16, 16), **kw):
    from networks.mlp import mlp

    return functools.partial(mlp, hidden=list(hidden), **kw)


def continuous_batch(rng, agent, n):
    return random_batch(rng, OBS, LOW, HIGH, n)


def discrete_batch(rng, agent, n):
    return random_batch(rng, OBS, 0.0, 1.0, n)._replace(action=rng.integers(0, NUM_ACTIONS, n).astype(np.int32))


def _box(path):
    """A builder of the agent class at `path` ("module.Class") that takes the box and one network."""
    def build(rng, **kw):
        module, cls = path.rsplit(".", 1)
        return getattr(importlib.import_module(module), cls)(OBS, LOW, HIGH, net(), rng, **kw)
    return build


def _crossq(rng, **kw):
    from agents.crossq import CrossQ

    return CrossQ(OBS, LOW, HIGH, net(batch_renorm=True, renorm_warmup=4), rng, policy_delay=2, **kw)


def _td7(rng, **kw):
    from agents.td7 import TD7
    from networks.sale import SALE

    return TD7(OBS, LOW, HIGH, SALE(zs_dim=8, encoder_hidden=16, critic_hidden=16, actor_hidden=16), rng,
               **{"target_update_every": 3, **kw})


def _dqn(rng, **kw):
    from agents.dqn import DQN

    return DQN(OBS, NUM_ACTIONS, net(), rng, **{"target_update_every": 3, **kw})


MRQ_NET = dict(zs_dim=8, za_dim=4, zsa_dim=8, encoder_hidden=16, value_hidden=16, policy_hidden=16)


def _mrq(rng, **kw):
    """MR.Q with the fused encoder schedule (its update is one call; the author's schedule adds a block
    call that tests/test_mrq.py drives) and target copies every 3 updates, so that K updates cross them."""
    from agents.mrq import MRQ
    from agents.mrq.networks import MRQNetworks

    return MRQ((OBS,), MRQNetworks(**MRQ_NET), rng, action_low=LOW, action_high=HIGH, enc_horizon=3, q_horizon=2,
               **{"target_update_every": 3, "encoder_schedule": "fused", **kw})


# conf/agent/drq.yaml's agent settings (its wider encoder and faded replay are the network's and the buffer's)
DRQ_SETTINGS = dict(infonce_weight=0.1, infonce_temperature=0.1, done_weight=0.0, pre_activ_weight=0.0,
                    value_grad_clip=0.0, reward_scaling=False, encoder_lr=3e-4, encoder_wd=0.01, value_wd=0.01,
                    policy_wd=0.01)


def _drq(rng, **kw):
    """DR.Q: MR.Q's agent with DR.Q's settings (tests/test_drq.py checks them against the preset)."""
    return _mrq(rng, **{**DRQ_SETTINGS, **kw})


def mrq_inputs(rng, agent, n):
    """MR.Q's inputs to one update: a batch, the runs that train the encoder, the reward scales."""
    from agents.mrq.replay import RunsBatch
    from buffers.types import Sequences

    h = agent.settings.enc_horizon
    runs = Sequences(rng.normal(size=(n, OBS)).astype(np.float32),
                     rng.uniform(LOW, HIGH, (n, h, len(LOW))).astype(np.float32),
                     rng.normal(size=(n, h)).astype(np.float32), rng.normal(size=(n, h, OBS)).astype(np.float32),
                     (rng.random((n, h)) < 0.2).astype(np.float32))
    return RunsBatch(continuous_batch(rng, agent, n), runs, np.float32(rng.uniform(1, 3)), np.float32(1.0))


def _ga(rng, **kw):
    from agents.ga import GA

    return GA((OBS,), net((8,)), rng, population=6, num_actions=NUM_ACTIONS, **kw)


def _ppo(rng, **kw):
    from agents.ppo import PPO, PPONetworks

    return PPO((OBS,), PPONetworks(hidden=[16, 16]), rng, num_actions=NUM_ACTIONS,
               **{"n_steps": 8, "num_minibatches": 2, "update_epochs": 2, **kw})


def _pqn(rng, **kw):
    from agents.pqn import PQN

    return PQN((OBS,), net(layer_norm=True, init="orthogonal"), rng, num_actions=NUM_ACTIONS, total_steps=1000,
               **{"n_steps": 8, "num_minibatches": 2, "update_epochs": 2, **kw})


# The golden runs' shared overrides (tests/test_golden.py adds its COMMON): 200 updates each
OFF_POLICY = ["total_steps=300", "learning_starts=100", "eval_every=300", "batch_size=32", "network.hidden=[32,32]"]
# conf/tuned/dqn_cartpole.yaml applies: its update cadence (0.5 per step, every 256 steps) set back to one per step
DQN_RUN = ["agent=dqn", "env=cartpole", *OFF_POLICY, "updates_per_step=1", "train_every=1",
           "agent.eps_decay_steps=200", "agent.target_update_every=50"]

AGENTS: dict[str, AgentEntry] = {e.name: e for e in [
    AgentEntry("td3", _box("agents.td3.TD3"), continuous_batch,
               {"td3": ["agent=td3", "env=pendulum", *OFF_POLICY]},
               compare=("eager", "xla"), fused=("eager", "graph", "xla"),
               # XLA lowers tf.random.Generator.normal to another sampler (same seed, other numbers)
               xla_settings={"target_noise": 0.0}),
    AgentEntry("ddpg", _box("agents.ddpg.DDPG"), continuous_batch,
               {"ddpg": ["agent=ddpg", "env=pendulum", *OFF_POLICY]}),
    AgentEntry("sac", _box("agents.sac.SAC"), continuous_batch,
               {"sac": ["agent=sac", "env=pendulum", *OFF_POLICY]}),
    # XLA for CrossQ (its many small Batch Renormalization ops are why speed=fast compiles it so); its
    # policy samples cannot be turned off, so its XLA update is compared with itself (fused) only
    AgentEntry("crossq", _crossq, continuous_batch,
               {"crossq": ["agent=crossq", "env=pendulum", *OFF_POLICY, "network.actor_hidden=[32,32]",
                           "network.renorm_warmup=100"]},
               fused=("graph", "xla")),
    # TD7 trains at episode ends: episodes of 100 steps, the policy acting from the end of the one at 200,
    # two phases of 100 updates at 300 and 400, two target copies. (Over 400 updates, the runs with and
    # without oneDNN's kernels drifted 300x the tolerance apart: too long to compare across CPUs.)
    AgentEntry("td7", _td7, continuous_batch,
               {"td7": ["agent=td7", "env=pendulum", "env.max_episode_steps=100", "total_steps=400",
                        "learning_starts=100", "eval_every=400", "batch_size=32", "network.zs_dim=8",
                        "network.encoder_hidden=16", "network.critic_hidden=16", "network.actor_hidden=16",
                        "agent.target_update_every=100", "buffer.max_reset_every=100"]}),
    AgentEntry("dqn", _dqn, discrete_batch,
               {"dqn": [*DQN_RUN, "agent.double=false"],  # conf/tuned/dqn_cartpole.yaml's plain DQN target
                "dqn_dueling_prioritized_nstep": [*DQN_RUN, "network=dueling_mlp", "network.hidden=[32,32]",
                                                  "buffer=prioritized", "buffer.n_step=3", "agent.double=true"]},
               discrete=True),
    # MR.Q's golden run: the author's schedule, two blocks of 100 encoder updates (at updates 1 and 101)
    AgentEntry("mrq", _mrq, mrq_inputs,
               {"mrq": ["agent=mrq", "env=pendulum", "total_steps=300", "learning_starts=100", "eval_every=300",
                        "batch_size=32", *[f"network.{k}={v}" for k, v in MRQ_NET.items()],
                        "agent.target_update_every=100"]}),
    AgentEntry("drq", _drq, mrq_inputs,
               {"drq": ["agent=drq", "env=pendulum", "total_steps=300", "learning_starts=100", "eval_every=300",
                        "batch_size=32", *[f"network.{k}={v}" for k, v in MRQ_NET.items()],
                        "agent.target_update_every=100"]}),
    # PPO learns from its rollouts (training/rollout.py), not from replay batches: its update is tests/test_ppo.py's.
    # Its golden run: 4 rollouts of 64 steps x 2 envs, each 2 epochs of 4 minibatches
    AgentEntry("ppo", _ppo, None,
               {"ppo": ["agent=ppo", "env=cartpole", "total_steps=512", "num_envs=2", "agent.n_steps=64",
                        "agent.num_minibatches=4", "agent.update_epochs=2", "eval_every=512", "network.hidden=[32,32]"]},
               discrete=True, rollouts=True),
    # A2C is PPO's code with conf/agent/a2c.yaml's settings; its golden run: 64 updates of 4 steps x 2 envs
    AgentEntry("a2c", _ppo, None,
               {"a2c": ["agent=a2c", "env=cartpole", "total_steps=512", "num_envs=2", "agent.n_steps=4",
                        "eval_every=512", "network.hidden=[32,32]"]},
               discrete=True, rollouts=True),
    # SB3's PPO (conf/agent/ppo_sb3.yaml), PPO's code; its golden run on Pendulum, where time limits end every
    # episode and SB3 bootstraps them, with the RL Zoo's PyTorch-default init and log-std of -2
    AgentEntry("ppo_sb3", _ppo, None,
               {"ppo_sb3": ["agent=ppo_sb3", "env=pendulum", "total_steps=512", "num_envs=2", "agent.n_steps=64",
                            "agent.num_minibatches=4", "agent.update_epochs=2", "eval_every=512", "network.hidden=[32,32]",
                            "network.ortho_init=false", "agent.log_std_init=-2.0"]},
               discrete=True, rollouts=True),
    # PQN: Q(lambda) on the same rollouts (its update is tests/test_pqn.py's); its golden run: 4 rollouts of 64
    # steps x 2 envs, each 2 epochs of 4 minibatches, epsilon falling over the first 256 steps
    AgentEntry("pqn", _pqn, None,
               {"pqn": ["agent=pqn", "env=cartpole", "total_steps=512", "num_envs=2", "agent.n_steps=64",
                        "agent.num_minibatches=4", "agent.update_epochs=2", "eval_every=512", "network.hidden=[32,32]"]},
               discrete=True, rollouts=True),
    AgentEntry("ga", _ga, None,
               {"ga": ["agent=ga", "env=cartpole", "agent.population=8", "network.hidden=[8]", "total_steps=1500",
                       "eval_every=1500"]},
               discrete=True),
]}

UPDATING = [name for name, entry in AGENTS.items() if entry.updates]


def build(name: str, compile: str = "graph", seed: int = 0, **settings):
    """Agent `name` of the registry with its update compiled as the loop drives it (speed settings
    among `settings` go to the learner)."""
    import keras

    from agents.compiled import CompiledAgent

    keras.utils.set_random_seed(seed)
    speed = {k: settings.pop(k) for k in ("numpy_acting", "batch_shards", "update_precision") if k in settings}
    return CompiledAgent(AGENTS[name].build(np.random.default_rng(seed), **settings), compile=compile, **speed)


def inputs(name: str, rng, agent, n: int = 32):
    """One update's inputs for agent `name`, as one stacked call of K = 1."""
    import tensorflow as tf

    return tf.nest.map_structure(lambda x: np.asarray(x)[None], AGENTS[name].inputs(rng, agent, n))


def stacked(name: str, rng, agent, k: int, n: int = 32):
    """K updates' inputs, each alone (K = 1) and all stacked into one call: (singles, stacked)."""
    import tensorflow as tf

    draws = [AGENTS[name].inputs(rng, agent, n) for _ in range(k)]
    singles = [tf.nest.map_structure(lambda x: np.asarray(x)[None], d) for d in draws]
    return singles, tf.nest.map_structure(lambda *xs: np.stack(xs), *draws)
