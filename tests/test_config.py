"""Every combination of conf/ groups composes and instantiates into a working run."""
import itertools
import os

import numpy as np
import pytest
from omegaconf import OmegaConf

from training.builder import build_run

CONF = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "conf")


def options(group):
    return sorted(f[:-5] for f in os.listdir(os.path.join(CONF, group)) if f.endswith(".yaml"))


def test_groups_have_the_expected_options():
    assert {"td3", "ddpg"} <= set(options("agent"))
    assert {"pendulum", "inverted_pendulum", "reacher", "hopper", "halfcheetah", "walker2d", "ant", "humanoid"} <= set(options("env"))


@pytest.mark.parametrize(
    "agent,network,buffer",
    list(itertools.product(["td3", "ddpg"], options("network"), options("buffer"))),
)
def test_every_combination_composes_and_instantiates(make_cfg, agent, network, buffer):
    for env in options("env"):
        cfg = make_cfg(f"agent={agent}", f"network={network}", f"buffer={buffer}", f"env={env}", "buffer.capacity=1000")
        OmegaConf.resolve(cfg)
        assert cfg.env.id.endswith(("-v1", "-v5"))
        assert cfg.total_steps > cfg.learning_starts
        run = build_run(cfg)
        try:
            obs, _ = run.envs.reset(seed=0)
            action = run.agent.act(obs, explore=True)
            space = run.envs.single_action_space
            assert action.shape == (1, space.shape[0])
            assert np.all(action >= space.low) and np.all(action <= space.high)
            next_obs, reward, term, trunc, _ = run.envs.step(action)
            run.buffer.add(obs, action, reward, next_obs, term, trunc)
            metrics = run.agent.update(run.buffer.sample(4))
            assert np.isfinite(float(metrics["critic_loss"]))
        finally:
            run.close()


def test_reference_settings_for_mujoco_and_small_tasks(make_cfg):
    ant = make_cfg("agent=td3", "env=ant")
    assert ant.env.id == "Ant-v5" and ant.learning_starts == 25000 and ant.total_steps == 1_000_000
    assert list(ant.network.hidden) == [256, 256] and ant.batch_size == 256
    assert ant.agent.policy_delay == 2 and ant.agent.target_noise == 0.2 and ant.agent.noise_clip == 0.5
    assert make_cfg("env=inverted_pendulum").learning_starts == 1000
    assert make_cfg("env=ant", "total_steps=5000").total_steps == 5000  # the command line wins
