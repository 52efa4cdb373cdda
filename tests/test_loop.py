"""The off-policy loop's own contract with what it is given (training/loop.py)."""
import functools

import gymnasium as gym
import pytest
from omegaconf import OmegaConf

from envs.factory import EnvConfigError, _make
from training.builder import build_run
from training.loggers import MultiLogger
from training.loop import train


@pytest.mark.parametrize("mode", [gym.vector.AutoresetMode.NEXT_STEP, gym.vector.AutoresetMode.DISABLED])
def test_a_users_vector_env_that_resets_on_the_next_step_is_refused_with_the_fix(make_cfg, mode):
    """gymnasium's default vector envs reset in the step after an episode's end: a step there is no
    transition and `final_obs` never comes, so the loop refuses them before stepping, naming the mode
    that works; the envs the project makes (same-step) train."""
    cfg = make_cfg("agent=td3", "env=pendulum", "network.hidden=[8,8]", "total_steps=40", "learning_starts=20",
                   "batch_size=8", "eval_every=40", "eval_episodes=1", "logger.progress=false")
    OmegaConf.resolve(cfg)
    run = build_run(cfg)
    own = gym.vector.SyncVectorEnv([functools.partial(_make, "Pendulum-v1", 50, {}, 1)], autoreset_mode=mode)
    try:
        with pytest.raises(EnvConfigError, match="same-step autoreset.*AutoresetMode.SAME_STEP"):
            train(run.learner, run.buffer, own, run.eval_env, run.settings, MultiLogger([]))
        assert len(run.buffer) == 0  # refused before a step
        summary = train(run.learner, run.buffer, run.envs, run.eval_env, run.settings, MultiLogger([]))
        assert summary["steps"] == 40 and summary["updates"] == 20
    finally:
        own.close()
        run.close()
