"""Learning tests: the agents must solve a small real task within a small budget.

Pendulum-v1 returns lie in about [-1600, 0]; a random policy scores about -1200 to -1500 and a
good one better than -200. The bar is a deterministic evaluation above -300 after 15k env steps.
"""
import pytest

from helpers import run_loop


def run_to_completion(cfg):
    return run_loop(cfg)[0]


@pytest.mark.slow
@pytest.mark.parametrize("agent,network", [
    ("td3", []), ("ddpg", []), ("sac", []),
    # SimBa's residual network on normalized observations, at about the MLP's cost
    ("sac", ["network=simba", "network.width=64", "network.actor_width=64"]),
])
def test_learns_pendulum_within_15k_steps(make_cfg, agent, network):
    cfg = make_cfg(f"agent={agent}", "env=pendulum", "total_steps=15000", "eval_every=15000", "seed=0",
                   "logger.progress=false", *network)
    summary = run_to_completion(cfg)
    assert summary["steps"] == 15000
    assert summary["updates"] == 15000 - cfg.learning_starts
    assert summary["final_return"] > -300, summary


@pytest.mark.slow
def test_crossq_learns_pendulum_within_5k_steps(make_cfg):
    """CrossQ's sample efficiency: the bar of the other agents at a third of their budget, with
    256-256 critics (the MLP's cost; the preset's 1024-1024 learn as well, slower on a CPU)."""
    cfg = make_cfg("agent=crossq", "env=pendulum", "total_steps=5000", "eval_every=5000", "seed=0",
                   "network.hidden=[256,256]", "logger.progress=false")
    summary = run_to_completion(cfg)
    assert summary["steps"] == 5000 and summary["updates"] == 5000 - cfg.learning_starts
    assert summary["final_return"] > -300, summary


@pytest.mark.slow
def test_dqn_wins_every_static_gridworld_game(make_cfg):
    cfg = make_cfg("agent=dqn", "env=gridworld", "env.mode=static", "total_steps=8000", "eval_every=8000",
                   "eval_episodes=100", "logger.progress=false")
    summary = run_to_completion(cfg)
    assert summary["final_success_rate"] == 1.0, summary


@pytest.mark.slow
def test_dqn_wins_90_percent_of_random_gridworld_games(make_cfg):
    cfg = make_cfg("agent=dqn", "env=gridworld", "env.mode=random", "total_steps=20000", "eval_every=20000",
                   "eval_episodes=1000", "logger.progress=false")
    summary = run_to_completion(cfg)
    assert summary["final_success_rate"] >= 0.90, summary


@pytest.mark.slow
def test_dqn_reaches_475_on_cartpole(make_cfg):
    """CartPole-v1's maximum is 500. DQN is known to oscillate on it after solving it, so the bar is
    that an evaluation within the budget reaches 475, the task's 'solved' threshold."""
    cfg = make_cfg("agent=dqn", "env=cartpole", "total_steps=50000", "eval_every=5000", "logger.progress=false")
    summary = run_to_completion(cfg)
    assert summary["best_return"] >= 475, summary


@pytest.mark.slow
def test_td7_learns_pendulum_within_5k_steps(make_cfg):
    """TD7's sample efficiency, as CrossQ's: the other agents' bar at a third of their budget, with
    networks of 64 (the author's 256 learn as well, slower). Without its policy checkpoints: on
    Pendulum one episode's return depends mostly on its start angle, and the author's rule (keep the
    checkpoint until an assessed policy's lowest return beats the checkpoint's) holds on to an early
    policy that drew an easy start, in the author's code too; the rule itself is tested by hand in
    test_td7.py, and the MuJoCo comparisons run with it."""
    cfg = make_cfg("agent=td7", "env=pendulum", "total_steps=5000", "eval_every=5000", "seed=0",
                   "agent.checkpoints=false",
                   *(f"network.{k}=64" for k in ("zs_dim", "encoder_hidden", "critic_hidden", "actor_hidden")),
                   "logger.progress=false")
    summary = run_to_completion(cfg)
    assert summary["steps"] == 5000 and summary["updates"] == 5000 - cfg.learning_starts
    assert summary["final_return"] > -300, summary
