"""The conf/ groups compose and instantiate into working runs: every agent with every network and
buffer it takes, and every pair of choices from two groups, each in at least one run."""
import itertools
import os

import gymnasium as gym
import numpy as np
import pytest
from omegaconf import OmegaConf, open_dict

from registry import AGENTS
from training.builder import build_run

CONF = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "conf")
PIXEL_ENVS = {"minatar", "atari"}
DISCRETE_ENVS = {"cartpole", "acrobot", "mountaincar", "gridworld"} | PIXEL_ENVS
CNNS = {"nature_cnn", "minatar_cnn", "impala_cnn"}
MRQ_AGENTS = {"mrq", "drq"}  # DR.Q is MR.Q's agent with other settings (conf/agent/drq.yaml)


def options(group):
    return sorted(f[:-5] for f in os.listdir(os.path.join(CONF, group)) if f.endswith(".yaml"))


def valid_combinations():
    for agent, network, buffer, env in itertools.product(options("agent"), options("network"), options("buffer"), options("env")):
        if agent == "pqn" or network == "pqn":  # Q-networks on rollouts; network=pqn is mlp with LayerNorm (and DQN's)
            q_networks = {"minatar": {"minatar_cnn"}, "atari": set()}.get(env, {"pqn", "mlp", "dueling_mlp"})
            if agent in ("pqn", "dqn") and buffer == "uniform" and env in DISCRETE_ENVS and network in q_networks:
                yield agent, network, buffer, env
            continue
        if AGENTS[agent].rollouts or network == "ppo":  # PPO's networks (an MLP, or a CNN on images), no replay
            if AGENTS[agent].rollouts and network == "ppo" and buffer == "uniform":
                yield agent, network, buffer, env
            continue
        if (agent in MRQ_AGENTS) != (network == "mrq"):
            continue  # MR.Q's networks are network=mrq's, which build only MR.Q's (and DR.Q's): refused (test_train_cli)
        if buffer == "mrq" and agent not in MRQ_AGENTS:
            continue  # LAP with MR.Q's settings: it is buffer=lap's code, checked with LAP's own agents there
        if agent in MRQ_AGENTS:  # vectors and images (not MinAtar's 10x10: refused), either kind of action, any replay
            if env != "minatar" and not (agent == "drq" and buffer == "uniform"):  # DR.Q's fade is prioritized replay's
                yield agent, network, buffer, env
            continue
        if (network in CNNS) != (env in PIXEL_ENVS):
            continue  # images take a CNN, vectors a dense network: refused with a message (test_train_cli)
        if (network, env) in {("nature_cnn", "minatar"), ("minatar_cnn", "atari")}:
            continue  # Nature's 8x8 stride-4 layers do not fit 10x10 (refused); MinAtar's on 84x84 is 14M weights
        if agent == "ga":  # either kind of action; no replay buffer (buffer=prioritized is refused: test_ga)
            if buffer == "uniform" and network not in ("dueling_mlp", "sale", *CNNS):
                yield agent, network, buffer, env
            continue
        discrete_agent = AGENTS[agent].discrete  # tests/registry.py
        if discrete_agent != (env in DISCRETE_ENVS):
            continue  # the action space does not fit: refused with a message (test_train_cli)
        if network == "dueling_mlp" and not discrete_agent:
            continue  # a dueling head is a Q-network head
        if agent == "crossq" and network != "mlp":
            continue  # CrossQ needs Batch Renormalization, which only mlp has: refused (test_train_cli)
        if (agent == "td7") != (network == "sale") or (agent == "td7" and buffer != "lap"):
            continue  # TD7's networks are SALE's, its LAP loss needs buffer=lap: refused (test_td7)
        if buffer == "lap" and agent not in ("td7", "dqn"):
            continue  # LAP is the prioritized buffer's code with other settings: td7's, and dqn's discrete actions
        yield agent, network, buffer, env


# What differs between the envs of one kind is the task, not the kinds and shapes of spaces an agent
# meets or the code that makes them: each kind is met by every agent, network and buffer that takes it.
ENV_KINDS = {**dict.fromkeys(("ant", "halfcheetah", "hopper", "humanoid", "inverted_pendulum", "reacher", "walker2d"),
                             "gymnasium-mujoco"),
             "pendulum": "classic-continuous", **dict.fromkeys(("cartpole", "acrobot", "mountaincar"), "classic-discrete"),
             "gridworld": "gridworld", "minatar": "minatar", "atari": "atari", "dmc": "dmc"}


def parts(combination) -> set:
    """What a run of the combination covers: its (agent, network, buffer), its env, and every pair of
    choices from two groups, the env counted by its kind."""
    agent, network, buffer, env = combination
    choices = (agent, network, buffer, ENV_KINDS[env])
    return ({("triple", agent, network, buffer), ("env", env)}
            | {(i, j, choices[i], choices[j]) for i, j in itertools.combinations(range(4), 2)})


def combinations():
    """Every valid (agent, network, buffer), every env, and every valid pair of choices from two
    groups (agent and kind of env, network and buffer, ...) in at least one combination: a greedy
    cover of the valid ones, in their order. (The product of all four groups, 180 runs, checked each
    choice again with every other; a cover of every pair with each env on its own, 102 runs, each
    agent again with every env of one kind.)"""
    valid = list(valid_combinations())
    uncovered, chosen = set().union(*map(parts, valid)), []
    while uncovered:
        best = max(valid, key=lambda c: len(parts(c) & uncovered))  # the first of the best: deterministic
        chosen.append(best)
        uncovered -= parts(best)
    return chosen


def test_the_cover_holds_every_agent_network_buffer_every_env_and_every_pair():
    chosen, valid = combinations(), list(valid_combinations())
    assert set(ENV_KINDS) == set(options("env")), "a new env needs its kind in ENV_KINDS"
    assert set(chosen) <= set(valid) and len(chosen) < len(valid) / 4
    assert set().union(*map(parts, valid)) == set().union(*map(parts, chosen))
    assert {env for *_, env in chosen} == set(options("env"))


def test_groups_have_the_expected_options():
    assert {"td3", "ddpg", "dqn", "sac"} <= set(options("agent"))
    assert {"mlp", "dueling_mlp", "nature_cnn", "impala_cnn", "minatar_cnn"} <= set(options("network"))
    assert {"uniform", "prioritized"} <= set(options("buffer"))
    assert {"pendulum", "inverted_pendulum", "reacher", "hopper", "halfcheetah", "walker2d", "ant", "humanoid",
            "cartpole", "acrobot", "mountaincar", "gridworld", "minatar", "atari"} <= set(options("env"))


def traced_in_graph(chosen) -> set:
    """The combinations whose update is traced in graph mode: the first of each agent and network on
    each kind of observation and action, where the update's input signature and layers differ. The
    others (other buffers, other tasks of the same kinds) run their update eagerly: the same code and
    checks, without a trace that would be most of their cost."""
    first = {}
    for agent, network, buffer, env in chosen:
        kind = (agent, network, env in PIXEL_ENVS or network in CNNS, env in DISCRETE_ENVS)
        first.setdefault(kind, (agent, network, buffer, env))
    return set(first.values())


COMBINATIONS = combinations()
GRAPH = traced_in_graph(COMBINATIONS)


@pytest.mark.parametrize("agent,network,buffer,env", COMBINATIONS)
def test_every_combination_composes_and_instantiates(make_cfg, agent, network, buffer, env):
    # MR.Q's model unrolled 2 steps, not 5: its trace is most of such a run's cost. CrossQ in graph
    # mode where traced: speed=fast's auto picks XLA for it (test_fast_paths), whose compile (10 s)
    # would be most of such a run's; its XLA update runs in test_agents' fused check and test_crossq's resume
    compile = "graph" if (agent, network, buffer, env) in GRAPH else "eager"
    extra = {"ga": ["agent.population=3"], "crossq": [f"speed.compile={compile}"],
             **dict.fromkeys(("ppo", "ppo_sb3"), ["agent.n_steps=4", "agent.num_minibatches=2", "agent.update_epochs=2"]),
             "a2c": ["agent.n_steps=4"],
             **{name: ["agent.enc_horizon=2", *(f"network.{k}=16" for k in ("zs_dim", "za_dim", "zsa_dim",
                                                                             "encoder_hidden", "value_hidden",
                                                                             "policy_hidden"))] for name in MRQ_AGENTS}
             }.get(agent, [])
    cfg = make_cfg(f"agent={agent}", f"network={network}", f"buffer={buffer}", f"env={env}", "buffer.capacity=1000",
                   "batch_size=4", f"speed.compile={compile}", *extra)
    OmegaConf.resolve(cfg)
    assert cfg.total_steps > cfg.learning_starts
    run = build_run(cfg)
    if agent == "ga":
        try:
            obs, _ = run.envs.reset(seed=0)
            for _ in range(3):
                action = run.learner.population_act(obs)
                assert run.envs.action_space.contains(action.astype(run.envs.action_space.dtype))
                obs, *_ = run.envs.step(action)
            run.learner.evolve(np.array([1.0, 3.0, 2.0]))
            assert run.buffer is None and run.envs.num_envs == 3
        finally:
            run.close()
        return
    if AGENTS[agent].rollouts:
        from training.rollout import collect, update_batch

        try:
            obs, _ = run.envs.reset(seed=0)
            rollout, obs, _, _ = collect(run.learner, run.envs, obs, 4, bootstrap_truncation=True)
            assert run.envs.action_space.contains(run.learner.env_action(rollout["action"][0]).astype(
                run.envs.action_space.dtype))
            metrics = run.learner.update(update_batch(rollout, rollout["reward"], rollout["reward"]), progress=0.0)
            assert run.buffer is None and all(np.isfinite(v) for v in metrics.values())
        finally:
            run.close()
        return
    try:
        obs, _ = run.envs.reset(seed=0)
        space = run.envs.single_action_space
        for _ in range(8):  # MR.Q samples runs of max(enc_horizon, q_horizon) steps
            action = run.learner.act(obs, explore=True)
            assert run.envs.action_space.contains(action.astype(run.envs.action_space.dtype))
            next_obs, reward, term, trunc, _ = run.envs.step(action)
            run.buffer.add(obs, action, reward, next_obs, term, trunc)
            obs = next_obs
        metrics = run.learner.update(run.learner.replay.draw(run.buffer, 4, 1))
        run.buffer.update_priorities(metrics["td_error"])
        assert all(np.isfinite(float(v)) for v in metrics.values() if np.ndim(v) == 0)
        assert isinstance(space, gym.spaces.Discrete) == (agent == "dqn" or env in DISCRETE_ENVS and agent in MRQ_AGENTS)
    finally:
        run.close()


def test_reference_settings_for_mujoco_and_small_tasks(make_cfg):
    ant = make_cfg("agent=td3", "env=ant")
    assert ant.env.id == "Ant-v5" and ant.learning_starts == 25000 and ant.total_steps == 1_000_000
    assert list(ant.network.hidden) == [256, 256] and ant.batch_size == 256
    assert ant.agent.policy_delay == 2 and ant.agent.target_noise == 0.2 and ant.agent.noise_clip == 0.5
    assert make_cfg("env=inverted_pendulum").learning_starts == 1000
    assert make_cfg("env=ant", "total_steps=5000").total_steps == 5000  # the command line wins


def test_mrq_replays_as_its_authors_lap_and_td7_resets_the_largest_priority(make_cfg):
    """MR.Q's buffer (facebookresearch/MRQ, buffer.py and MRQ.py's hyper-parameters): LAP with alpha
    0.4, priorities floored at 1, no importance weights, 3-step returns, and its largest priority
    never reset, where TD7's is reset at every target update (every 250)."""
    mrq, td7 = make_cfg("agent=mrq", "env=hopper").buffer, make_cfg("agent=td7", "buffer=lap", "env=hopper").buffer
    assert mrq._target_ == td7._target_ == "buffers.prioritized.PrioritizedReplay"
    assert (mrq.alpha, mrq.min_priority, mrq.importance_weights, mrq.n_step) == (0.4, 1.0, False, 3)
    assert mrq.max_reset_every == 0 and td7.max_reset_every == 250


def test_tuned_presets_apply_to_their_pair_only_and_yield_to_the_command_line(make_cfg):
    cartpole = make_cfg("agent=dqn", "env=cartpole")
    assert cartpole.batch_size == 64 and cartpole.train_every == 256 and cartpole.agent.target_update_every == 128
    assert make_cfg("agent=dqn", "env=cartpole", "batch_size=32").batch_size == 32
    assert make_cfg("agent=dqn", "env=gridworld").gamma == 0.9
    assert make_cfg("agent=td3", "env=pendulum").batch_size == 256
    assert make_cfg("agent=dqn", "env=gridworld", "env.mode=random").env.kwargs.mode == "random"
    # MR.Q's DMC preset: the author's action repeat of 2 from states; other agents keep env=dmc's own
    assert make_cfg("agent=mrq", "env=dmc").env.kwargs.action_repeat == 2
    assert make_cfg("agent=sac", "env=dmc").env.kwargs.action_repeat is None


@pytest.mark.parametrize("overrides,obs_shape,stack,pad", [
    # the author's DmcHyperparameters.visual_history and pixel_augs
    (["agent=mrq", "env=dmc", "env.pixels=true"], (84, 84, 9), 3, 4),
    (["agent=mrq", "env=dmc"], (17,), 1, None),
    (["agent=mrq", "env=atari"], (84, 84, 4), 4, 4),
    (["agent=mrq", "env=hopper"], (11,), 1, None),
    (["agent=sac", "env=dmc", "env.pixels=true", "network=nature_cnn"], (84, 84, 9), 3, None),  # shifts on request
    (["agent=mrq", "env=dmc", "env.pixels=true", "env.frame_stack=1", "network.random_shift=0"], (84, 84, 3), 1, None),
])
def test_pixel_defaults_follow_the_observations(make_cfg, overrides, obs_shape, stack, pad):
    from training.builder import random_shift
    from training.config import frame_stack

    cfg = make_cfg(*overrides)
    shift = random_shift(cfg, obs_shape)
    assert frame_stack(cfg) == stack and (shift.pad if shift else None) == pad


def test_warnings_name_settings_that_run_but_never_learn(make_cfg):
    from training.config import warnings

    assert warnings(make_cfg()) == []
    assert warnings(make_cfg("updates_per_step=0")) == [
        "updates_per_step=0: the agent never updates, so it collects data and never learns."]


def test_resume_keeps_values_that_interpolated_the_old_total(tmp_path):
    """Extending a run changes total_steps only: prioritized replay's beta_steps (${total_steps} in
    conf/buffer/prioritized.yaml) stays at the total the run was planned with."""
    from training.resume import resume_config

    os.makedirs(tmp_path / ".hydra")
    OmegaConf.save(OmegaConf.create({"total_steps": 1000, "speed": {}, "logger": {"progress": True},
                                     "buffer": {"beta_steps": "${total_steps}"}}), tmp_path / ".hydra" / "config.yaml")
    cfg = resume_config(str(tmp_path), ["total_steps=3000", "logger.progress=false"])
    assert cfg.total_steps == 3000 and cfg.logger.progress is False and cfg.buffer.beta_steps == 1000


OLD_RUN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "run_before_speed_group")


def test_a_config_saved_before_the_speed_group_moves_its_keys():
    from training.resume import load_run_config

    cfg = load_run_config(OLD_RUN)  # saved with compile, batch_shards, checkpoint_every, ... at the top
    assert cfg.speed.compile == "graph" and cfg.speed.batch_shards == "auto" and cfg.speed.steps_per_call == 1000
    assert cfg.speed.numpy_acting is True and cfg.speed.threads.inter_op == "auto"  # agent.fast_act, tf_threads
    assert cfg.checkpoint.every == 0 and cfg.checkpoint.buffer is False and cfg.logger.progress is False
    assert not {"compile", "batch_shards", "update_precision", "fast_act"} & set(cfg.agent)
    assert not {"compile", "tf_threads", "checkpoint_every", "save_buffer", "log_every", "progress"} & set(cfg)
    OmegaConf.resolve(cfg)
    from training.config import validate

    validate(cfg)


@pytest.mark.parametrize("target", ["agents.sac.SAC", "agents.crossq.CrossQ"])
def test_a_sac_run_saved_before_tanh_epsilon_resumes_with_the_exact_correction_it_ran_with(tmp_path, target):
    """agent.tanh_epsilon came with SB3's 1e-6 as its default; a run saved before it (no such key)
    ran with the exact log(1 - tanh(u)^2), and keeps it on resume. A run that has the key keeps its own."""
    from training.resume import load_run_config

    for run, agent, want in (("old", {"_target_": target, "tau": 0.005}, 0.0),
                             ("new", {"_target_": target, "tanh_epsilon": 1e-6}, 1e-6)):
        os.makedirs(tmp_path / run / ".hydra")
        OmegaConf.save(OmegaConf.create({"speed": {}, "agent": agent}), tmp_path / run / ".hydra" / "config.yaml")
        assert load_run_config(str(tmp_path / run)).agent.tanh_epsilon == want


def test_an_mrq_run_saved_before_its_networks_moved_builds_them_from_their_new_place(tmp_path):
    """MR.Q's networks moved from networks/mrq.py into agents/mrq/: a saved config naming the old
    place loads with the new one, which builds (and passes the trusted-targets check)."""
    from hydra.utils import get_class

    from training.resume import MOVED_TARGETS, load_run_config

    os.makedirs(tmp_path / ".hydra")
    OmegaConf.save(OmegaConf.create({"speed": {}, "agent": {"_target_": "agents.mrq.MRQ"},
                                     "network": {"_target_": "networks.mrq.MRQNetworks", "zs_dim": 16}}),
                   tmp_path / ".hydra" / "config.yaml")
    network = load_run_config(str(tmp_path)).network
    assert network._target_ == MOVED_TARGETS["networks.mrq.MRQNetworks"] == "agents.mrq.MRQNetworks"
    assert get_class(network._target_)(zs_dim=network.zs_dim).zs_dim == 16


def test_resume_auto_of_a_sac_run_saved_before_tanh_epsilon_keeps_the_exact_correction(tmp_path):
    """resume=auto composes the config anew (today's default 1e-6) and Hydra writes it over the
    run's: the Hydra callback gives it the run's exact form first, unless the command sets the key."""
    from training.callbacks import RefuseExistingRunDir
    from training.config import compose_config

    saved = compose_config(["agent=sac"])
    with open_dict(saved.agent):
        del saved.agent["tanh_epsilon"]
    os.makedirs(tmp_path / ".hydra")
    OmegaConf.save(saved, tmp_path / ".hydra" / "config.yaml")
    for given, want in (((), 0.0), (("agent.tanh_epsilon=1e-6",), 1e-6)):
        config = compose_config(["agent=sac", "resume=auto", f"hydra.run.dir={tmp_path}", *given],
                                return_hydra_config=True)
        assert config.agent.tanh_epsilon == 1e-6  # today's default
        RefuseExistingRunDir().on_run_start(config)
        assert config.agent.tanh_epsilon == want
    config = compose_config(["agent=td3", "resume=auto", f"hydra.run.dir={tmp_path}"], return_hydra_config=True)
    RefuseExistingRunDir().on_run_start(config)
    assert "tanh_epsilon" not in config.agent


def test_a_run_saved_before_the_redesign_evaluates_to_its_own_measure_and_is_never_unpickled(tmp_path):
    """A run of the code before the speed group (47df771: TD3 16-16 on Pendulum, 300 steps, no
    buffer in its checkpoint): evaluate.py restores it and, with the training run's evaluation
    seed (seed + 100) and episode count, measures the return the run itself recorded; its state is
    a pickle, which no version loads, so resume refuses it with its files untouched, and names what
    the user can do instead."""
    import json
    import shutil
    import subprocess
    import sys

    run_dir = tmp_path / "old"
    shutil.copytree(OLD_RUN, run_dir)
    recorded = json.loads((run_dir / "summary.json").read_text())["final_return"]
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    proc = subprocess.run([sys.executable, "evaluate.py", f"run_dir={run_dir}", "episodes=1", "seed=100"],
                          cwd=root, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    measured = json.loads((run_dir / "eval" / "latest.json").read_text())["return_mean"]
    assert measured == pytest.approx(recorded, rel=1e-4)
    before = {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}
    proc = subprocess.run([sys.executable, "train.py", f"resume={run_dir}", "total_steps=400"],
                          cwd=root, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 2 and "never loads one" in proc.stderr and "evaluate.py" in proc.stderr, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    assert {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()} == before


def test_a_config_of_many_tasks_names_its_runs_by_the_task(make_cfg):
    """aggregate.py groups runs by env: env=atari, minatar and dmc each hold many tasks, and their
    `label` keeps a sweep over games or tasks apart (one group per game, not one pooled group)."""
    from training.resume import env_label

    for overrides, name in ((["agent=dqn", "env=atari", "env.game=Pong"], "atari-Pong"),
                            (["agent=dqn", "env=minatar", "env.game=seaquest"], "minatar-seaquest"),
                            (["agent=sac", "env=dmc", "env.domain=walker", "env.task=walk"], "dmc-walker-walk"),
                            (["agent=sac", "env=pendulum"], "pendulum")):
        cfg = make_cfg(*overrides)
        choice = overrides[1].split("=")[1]
        assert env_label({"env": choice}, cfg.env.id, overrides, cfg.env.get("label")) == name
        assert env_label({"env": choice}, "Other-v0", [*overrides, "env.id=Other-v0"], cfg.env.get("label")) == "Other-v0"


def test_a_run_saved_before_its_env_had_a_label_takes_the_label_of_today(make_cfg):
    """aggregate.py reads an old Atari run (no env.label in its saved config) as atari-Pong, as it
    reads a new one, so a sweep that spans the change stays one group per game."""
    from omegaconf import open_dict

    from analysis.runs import MISSING, _label_of_today

    cfg = make_cfg("agent=dqn", "env=atari", "env.game=Pong")
    with open_dict(cfg):
        del cfg.env["label"]
    assert _label_of_today(cfg, "atari") == "atari-Pong"
    assert _label_of_today(cfg, "pendulum") is MISSING  # pendulum.yaml has no label
