"""The loop's fast paths change how fast a run goes, never what it computes: fused updates and
vector envs keep the update-to-data ratio, and a fused run equals the same run update by update."""
import numpy as np
import pytest
from omegaconf import OmegaConf

from training.builder import build_run, loop_settings
from training.loggers import MultiLogger
from training.loop import train


class Calls:
    """Counts how the loop reaches the agent."""

    def __init__(self, agent):
        self.update = self.update_many = 0
        self.batches = 0
        orig_update, orig_many = agent.update, agent.update_many

        def update(batch):
            self.update += 1
            self.batches += 1
            return orig_update(batch)

        def update_many(batches):
            self.update_many += 1
            self.batches += len(batches.reward)
            return orig_many(batches)

        agent.update, agent.update_many = update, update_many


def run(cfg):
    OmegaConf.resolve(cfg)
    parts = build_run(cfg)
    calls = Calls(parts.agent)
    try:
        summary = train(parts.agent, parts.buffer, parts.envs, parts.eval_env, loop_settings(cfg), MultiLogger([]))
        weights = [np.array(w) for w in parts.agent.actor.get_weights()]
    finally:
        parts.close()
    return summary, calls, weights


COMMON = ["env=pendulum", "total_steps=480", "learning_starts=200", "eval_every=1000", "eval_episodes=1",
          "batch_size=32", "network.hidden=[32,32]", "deterministic=true", "progress=false"]


def test_fused_run_equals_the_same_run_update_by_update(make_cfg):
    fused, calls_f, w_fused = run(make_cfg(*COMMON, "train_every=8", "fuse_updates=true"))
    plain, calls_p, w_plain = run(make_cfg(*COMMON, "train_every=8", "fuse_updates=false"))
    assert fused["updates"] == plain["updates"] == 280
    assert calls_f.update == 0 and calls_f.update_many == 35 and calls_f.batches == 280
    assert calls_p.update_many == 0 and calls_p.update == 280
    for a, b in zip(w_fused, w_plain):  # same batches, same updates: the same actor
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
    assert fused["final_return"] == pytest.approx(plain["final_return"], rel=1e-3)


@pytest.mark.parametrize("vectorization", ["sync", "async"])
@pytest.mark.parametrize("updates_per_step", ["1", "0.5"])
def test_vector_envs_keep_the_update_to_data_ratio(make_cfg, vectorization, updates_per_step):
    summary, calls, _ = run(make_cfg(*COMMON, "num_envs=4", f"vectorization={vectorization}",
                                     f"updates_per_step={updates_per_step}"))
    expected = int((480 - 200) * float(updates_per_step))
    assert summary["steps"] == 480 and summary["updates"] == calls.batches == expected
    # four transitions per loop iteration: their updates go in one fused call
    assert calls.update == 0 and calls.update_many == 70
