"""Learning tests: the agents must solve a small real task within a small budget.

Pendulum-v1 returns lie in about [-1600, 0]; a random policy scores about -1200 to -1500 and a
good one better than -200. The bar is a deterministic evaluation above -300 after at most 15k env steps.

A return alone passes some broken algorithms (a SAC whose temperature never moves still solves
Pendulum), so the tests also check what the algorithm's parts must have done: the critics' values
(logged on the last update's batch every 1000 steps) are of the size of discounted returns, which
no critic regressing on rewards alone reaches; SAC's temperature fell and took the policy's entropy
to its target; TD7's evaluation policy is its checkpoint, taken exactly where its schedule says.
"""
import numpy as np
import pytest

from helpers import Records, run_loop

# Pendulum's reward is -(theta^2 + 0.1 theta_dot^2 + 0.001 u^2), |theta| <= pi, |theta_dot| <= 8, |u| <= 2:
# no single reward is below -16.27. A critic regressing on rewards alone (no bootstrapping) stays
# within [-16.27, 0] (measured: a mean of -6 to -8); discounted returns (gamma 0.99) of states away
# from the top go to hundreds (measured: a mean Q of -45 to -75 over the replay's batches).
MAX_ABS_REWARD = np.pi**2 + 0.1 * 8**2 + 0.001 * 2**2
Q_BAR = -MAX_ABS_REWARD  # the mean Q over the last records must lie beyond any one reward


def run_to_completion(cfg, records=None, before_train=None):
    return run_loop(cfg, records, before_train)[0]


def late_mean(records, key, from_step):
    """The mean of an update metric over the records logged at `from_step` and after."""
    values = [m[key] for step, m in records.rows["update"] if step >= from_step and key in m]
    assert len(values) >= 3, records.rows["update"]
    return float(np.mean(values))


def check_critic_bootstraps(records, from_step, key="q1"):
    q = late_mean(records, key, from_step)
    assert q < Q_BAR, f"mean {key} {q:.1f} from step {from_step}: not beyond {Q_BAR:.1f}, as a critic of rewards only"


@pytest.mark.slow
@pytest.mark.parametrize("agent,extra,steps", [
    # networks of 64: the preset's 256 learn as well, three times slower. TD3's seed 0 evaluates at
    # -424 to -855 from 6k to 9k before it settles (-180 from 10k): 12k
    ("td3", ["network.hidden=[64,64]"], 12000), ("sac", ["network.hidden=[64,64]"], 10000),
    # DDPG on SimBa's residual network on normalized observations (DDPG on an MLP of 64 oscillates
    # on this seed: -603 at 10k after -175 at 9k; SAC's update costs twice as much). Of width 32, its
    # seed 0 evaluates at -343 at 4k, then -219, -174, -179, -178 from 5k to 8k: 7k (width 64 learns
    # as well, -313 at 5k then -186 to -207 to 10k, at twice the cost)
    ("ddpg", ["network=simba", "network.width=32", "network.actor_width=32"], 7000),
])
def test_learns_pendulum_within_15k_steps(make_cfg, agent, extra, steps):
    """Each within the budget its seed 0 needs with a margin (evaluated every 1000 steps: SAC better
    than -200 from 8k on); the parts' checks over the last third of the run."""
    cfg = make_cfg(f"agent={agent}", "env=pendulum", f"total_steps={steps}", f"eval_every={steps}", "seed=0",
                   "logger.progress=false", *extra)
    records = Records()
    summary = run_to_completion(cfg, records)
    assert summary["steps"] == steps
    assert summary["updates"] == steps - cfg.learning_starts
    assert summary["final_return"] > -300, summary
    last_third = steps * 2 // 3 // 1000 * 1000
    check_critic_bootstraps(records, from_step=last_third)
    if agent == "sac":
        # the temperature (1.0 at the start) learned: it fell well below its start, and the policy's
        # entropy (of the squashed action, per batch) came to its target -|A| = -1
        assert cfg.agent.init_alpha == 1.0 and cfg.agent.target_entropy == "auto"
        alpha = records.rows["update"][-1][1]["alpha"]
        assert alpha < 0.2, f"alpha {alpha:.3f} at the end: not well below its start 1.0"
        entropy = late_mean(records, "entropy", from_step=last_third)
        assert abs(entropy - (-1.0)) < 0.5, f"mean entropy {entropy:.2f} over the last records: not near its target -1"


@pytest.mark.slow
def test_crossq_learns_pendulum_within_5k_steps(make_cfg):
    """CrossQ's sample efficiency: the bar of the other agents at half their budget, with networks of
    64 (the preset's 1024-1024 critics learn as well, slower on a CPU): -218 at 4k, -207 at 5k."""
    cfg = make_cfg("agent=crossq", "env=pendulum", "total_steps=5000", "eval_every=5000", "seed=0",
                   "network.hidden=[64,64]", "logger.progress=false")
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
    """An update every 4 steps (SB3's train_freq) learns the random mode as the preset's one per step
    does, at a quarter of the cost (seeds 0 and 1: 93.5% and 93.9% at 20k against 93.2% with every
    step's update; the static mode needs every step's, below)."""
    cfg = make_cfg("agent=dqn", "env=gridworld", "env.mode=random", "total_steps=20000", "eval_every=20000",
                   "eval_episodes=1000", "train_every=4", "updates_per_step=0.25", "logger.progress=false")
    summary = run_to_completion(cfg)
    assert summary["final_success_rate"] >= 0.90, summary


@pytest.mark.slow
def test_dqn_learns_the_gridworld_from_images(make_cfg):
    """A CNN from pixels, frames stored once, acting in numpy on its convolutions: the Gridworld
    with the player placed at random, from its board as a (4, 4, 4) image."""
    cfg = make_cfg("agent=dqn", "env=gridworld", "env.mode=player", "env.pixels=true", "env.kwargs.noise=0",
                   "network=minatar_cnn", "network.convs=[[32,2,1]]", "total_steps=6000", "eval_every=6000",
                   "eval_episodes=200", "agent.eps_decay_steps=4000", "logger.progress=false")
    summary = run_to_completion(cfg)
    assert summary["final_success_rate"] >= 0.95, summary


@pytest.mark.slow
def test_dqn_reaches_475_on_cartpole(make_cfg):
    """CartPole-v1's maximum is 500. DQN is known to oscillate on it after solving it, so the bar is
    that an evaluation within the budget reaches 475, the task's 'solved' threshold."""
    cfg = make_cfg("agent=dqn", "env=cartpole", "total_steps=50000", "eval_every=5000", "logger.progress=false")
    summary = run_to_completion(cfg)
    assert summary["best_return"] >= 475, summary


@pytest.mark.slow
def test_td7_learns_pendulum_within_8k_steps_acting_with_its_checkpoints(make_cfg):
    """TD7's sample efficiency, with its policy checkpoints: evaluation acts with the checkpoint,
    which must be a policy that has learned, and it must be the policy the checkpoint schedule
    chose. Networks of 64 (the author's 256 learn as well, slower). The schedule as the author's
    runs it after checkpoint_after updates (3 episodes assess a policy, the checkpoint's bar reset),
    here from the first phase on: the author's first phase (1 episode per policy until 750k
    updates) keeps a policy that drew one easy start on Pendulum, whose returns depend mostly on
    the start angle (an early policy's -0.5 holds a 5k-step run's evaluation at -860, in the
    author's code too). The schedule's arithmetic is tested by hand in test_td7.py; here, that the
    agent takes the checkpoints it names, and evaluates with them."""
    from agents.needs import PolicyCheckpoints
    from training.assessment import Assessment, assess

    cfg = make_cfg("agent=td7", "env=pendulum", "total_steps=8000", "eval_every=8000", "seed=0",
                   "agent.checkpoints=true", "agent.checkpoint_episodes=3", "agent.checkpoint_after=1",
                   "agent.lap=true", "buffer=lap",
                   *(f"network.{k}=64" for k in ("zs_dim", "encoder_hidden", "critic_hidden", "actor_hidden")),
                   "logger.progress=false")
    kept = []  # the acting policy's weights at each keep

    def record_keeps(run):
        learner = run.learner
        keep_policy = learner.keep_policy

        def recorded():
            kept.append([w.numpy().copy() for w in learner.agent.acting.network.weights])
            keep_policy()

        learner.keep_policy = recorded
        agents.append(learner.agent)

    agents, records = [], Records()
    summary = run_to_completion(cfg, records, record_keeps)
    agent = agents[0]
    assert summary["steps"] == 8000

    # the schedule replayed on this run's training episodes: the updates it trains and the keeps it makes
    state, done, due, keeps, acting = Assessment(), 0, 0, 0, False
    for step, m in records.rows["train"]:
        if not acting:
            acting = step > cfg.learning_starts  # the first episode end past learning_starts trains nothing
            continue
        due += m["episode_length"]
        state, train, keep = assess(state, m["episode_return"], PolicyCheckpoints(3, 1, 0.9), done, due)
        keeps += keep
        done, due = (done + due, 0) if train else (done, due)
    assert summary["updates"] == done >= 8000 - cfg.learning_starts - 4 * 200
    assert len(kept) == keeps and 3 <= keeps < len(records.rows["train"]) / 2  # the rule both took and refused
    for e, a in zip(agent.eval_acting.network.weights, kept[-1], strict=True):
        np.testing.assert_array_equal(e.numpy(), a)  # evaluation acts with the last policy kept
    assert summary["final_return"] > -300, summary
    check_critic_bootstraps(records, from_step=6000, key="q")


@pytest.mark.slow
def test_mrq_learns_pendulum_within_3k_steps(make_cfg):
    """MR.Q with networks of 64 (the preset's are 512): the bar of the other agents at a fifth of
    their budget. Its parts did their work: the model predicts rewards from states and actions (its
    two-hot loss per step is well below that of the best prediction that ignores them, the
    entropy of the replay's mean two-hot reward), and the reward scale followed the buffer's mean
    absolute reward."""
    import tensorflow as tf

    from agents.mrq import losses

    widths = [f"network.{k}={w}" for k, w in (("zs_dim", 64), ("za_dim", 32), ("zsa_dim", 64), ("encoder_hidden", 64),
                                               ("value_hidden", 64), ("policy_hidden", 64))]
    cfg = make_cfg("agent=mrq", "env=pendulum", "total_steps=3000", "learning_starts=1000", "eval_every=3000",
                   "eval_episodes=5", "seed=0", "logger.progress=false", *widths)
    records = Records()
    summary, run = run_loop(cfg, records)
    assert summary["updates"] == 2000 and summary["final_return"] > -300, summary
    updates = [m for _, m in records.rows["update"] if "reward_loss" in m]
    mean = losses.two_hot(tf.constant(run.buffer.field("reward")), run.learner.agent.bins).numpy().mean(axis=0)
    blind = -np.sum(mean[mean > 0] * np.log(mean[mean > 0]))
    assert updates[-1]["reward_loss"] / cfg.agent.enc_horizon < 0.7 * blind, (updates[-1], blind)
    scale = run.buffer.mean_abs_reward()  # moved little over the last 250 updates' 250 steps
    assert abs(updates[-1]["reward_scale"] - scale) < 0.1 * scale
    assert updates[-1]["reward_scale"] != updates[0]["reward_scale"]
