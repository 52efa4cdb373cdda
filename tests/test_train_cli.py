"""train.py as a user runs it: a subprocess smoke run and the bad inputs a user would type."""
import csv
import glob
import json
import math
import os
import subprocess
import sys

import pytest

from helpers import train_in_process
from registry import AGENTS

AGENT_CHOICES = ", ".join(sorted(AGENTS))  # what train.py lists: conf/agent's yamls (tests/test_registry.py)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def train(tmp_path, *overrides, timeout=600, env=None):
    cmd = [sys.executable, "train.py", f"hydra.run.dir={tmp_path}", "logger.progress=false", *overrides]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})


def read_csv(path):
    with open(path) as f:
        return list(csv.DictReader(f))


@pytest.mark.parametrize("agent", ["td3", "ddpg"])
def test_smoke_run_just_past_learning_starts(tmp_path, agent):
    # from a shell set up for JAX work: train.py runs Keras on TensorFlow whatever KERAS_BACKEND says
    proc = train(
        tmp_path, f"agent={agent}", "env=pendulum", "total_steps=300", "learning_starts=200",
        "eval_every=150", "eval_episodes=1", "batch_size=32", "logger.every=100", env={"KERAS_BACKEND": "jax"},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    assert "[eval] step=300" in proc.stdout and "done: 300 steps" in proc.stdout
    # what runs, at the start; where the results are and what to do with them, at the end
    assert proc.stdout.splitlines()[0].startswith(f"training {agent} on ") and str(tmp_path) in proc.stdout.splitlines()[0]
    assert f"python evaluate.py run_dir={tmp_path}" in proc.stdout and f"tensorboard --logdir {tmp_path}" in proc.stdout
    evals = read_csv(tmp_path / "eval.csv")
    assert [int(r["step"]) for r in evals] == [0, 150, 300]
    assert all(float(r["length_mean"]) == 200 for r in evals)
    episodes = read_csv(tmp_path / "train.csv")
    assert [int(r["step"]) for r in episodes] == [200]  # Pendulum's 200-step time limit
    updates = read_csv(tmp_path / "update.csv")
    assert [int(r["updates"]) for r in updates] == [0, 0, 100]  # updates begin at learning_starts
    last = {k: float(v) for k, v in updates[-1].items()}
    assert all(math.isfinite(v) for v in last.values()), last
    # 100 updates on Pendulum's rewards (all in [-16.3, 0], about -5 a step here) have taught the
    # critic negative values (an untrained one reads about 0) and the actor to minimise -Q
    assert last["q1"] < -1 and last["target_q"] < -1 and last["actor_loss"] > 1, last
    # the last update's critic_loss, a mean squared TD error (summed over TD3's two critics), is at
    # least the squared gap between the means of its Q and its target
    gap = sum((last[q] - last["target_q"]) ** 2 for q in ("q1", "q2") if q in last)
    assert last["critic_loss"] >= gap and last["critic_loss"] > 0, last
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["steps"] == 300 and summary["updates"] == 100
    assert glob.glob(str(tmp_path / "tb" / "events.out.tfevents.*"))
    assert (tmp_path / ".hydra" / "config.yaml").exists()


@pytest.mark.parametrize(
    "overrides,message",
    [
        (["env.id=CartPole-v1"], "needs a continuous (Box) action space"),
        (["learning_starts=5000", "total_steps=5000"], "learning_starts (5000) must be smaller than total_steps"),
        (["batch_size=2000", "buffer.capacity=1000"], "batch_size (2000) is larger than the replay buffer's capacity"),
        (["total_steps=0"], "total_steps must be a positive integer"),
        (["total_steps=-5"], "total_steps must be a positive integer"),
        (["env.id=Pendulm-v1"], "Did you mean Pendulum-v1"),
        (["env.id=my_envs:Pendulum-v1"], "names the module 'my_envs' to import before making 'Pendulum-v1', and it cannot"),
        (["env.id=LunarLanderContinuous-v3"], "LunarLanderContinuous-v3 needs a package that is not installed"),
        (["speed.compile=fast"], "compile must be eager, graph, xla or auto"),
        (["speed.update_precision=float16"], "speed.update_precision must be float32 or bfloat16, got 'float16'; set"),
        (["speed.steps_per_call=-1"], "steps_per_call must be a non-negative integer"),
        (["speed.threads.inter_op=0"], "speed.threads.inter_op must be a positive integer, null (TF's default) or auto"),
        (["speed.threads.intra_op=many"], "speed.threads.intra_op must be a positive integer, null (TF's default) or auto"),
        (["+speed.threads.intra=1"], "speed.threads.intra is not a thread pool; the pools are speed.threads.inter_op and"),
        (["speed.batch_shards=0"], "batch_shards must be a positive integer or auto, got 0"),
        (["speed.batch_shards=3"], "batch_size (256) does not split into speed.batch_shards=3 equal shards"),
        (["agent.tau=2.0"], "agent.tau must be in (0, 1]"),
        (["agent=dqn", "env=cartpole", "agent.tau=0"], "agent.tau must be in (0, 1]"),
        (["checkpoint.every=-1"], "checkpoint.every must be a non-negative integer"),
        (["logger.every=0"], "logger.every must be a positive integer"),
        (["speed.fuse_updates=maybe"], "speed.fuse_updates must be true or false"),
        (["speed.batch_shards=two"], "batch_shards must be a positive integer or auto, got 'two'"),
        (["batch_size=100", "speed.batch_shards=3"], "batch_size (100) does not split into speed.batch_shards=3 equal shards"),
        (["agent=dqn", "env=pendulum"], "DQN needs a discrete action space"),
        (["agent=dqn", "env=cartpole", "buffer=prioritized", "buffer.alpha=-1"], "buffer.alpha must be >= 0"),
        (["agent=dqn", "env=cartpole", "buffer=prioritized", "buffer.beta=1.5"], "buffer.beta must lie in [0, 1]"),
        (["agent=dqn", "env=cartpole", "buffer.n_step=0"], "buffer.n_step must be an integer >= 1"),
        (["agent=dqn", "env=gridworld", "env.mode=chaos"], "Gridworld mode must be one of static, player, random"),
        (["agent=dqn", "env=gridworld", "env.kwargs.size=3"], "Gridworld size must be an integer >= 4"),
        (["agent=td3", "network=dueling_mlp"], "a dueling head outputs Q-values"),
        (["agent=sac", "env=cartpole"], "SAC needs a continuous (Box) action space"),
        (["agent=sac", "agent.target_entropy=high"], "agent.target_entropy must be a number or auto"),
        (["agent=sac", "agent.tau=1.5"], "agent.tau must be in (0, 1]"),
        (["agent.policy_delay=0"], "agent.policy_delay must be an integer >= 1"),
        (["network.init=xavier"], "network.init must be one of torch, keras"),
        (["agent=crossq", "network=simba"], "agent=crossq needs Batch Renormalization in its networks"),
        (["agent=crossq", "network.batch_renorm=false"], "agent=crossq needs Batch Renormalization in its networks"),
        (["agent=crossq", "agent.policy_delay=0"], "agent.policy_delay must be an integer >= 1 (3 in CrossQ"),
        (["agent=crossq", "speed.batch_shards=2"], "speed.batch_shards=2 with network.batch_renorm=true"),
        (["agent=crossq", "network.renorm_momentum=0"], "network.renorm_momentum must be in (0, 1]"),
        (["agent=crossq", "env=cartpole"], "CrossQ needs a continuous (Box) action space"),
        (["agent=sac", "network=simba", "network.blocks=0"], "network.blocks must be an integer >= 1"),
        (["network=simba", "network.width=0"], "network.width must be a positive integer"),
        (["network=simba", "network.obs_norm=maybe"], "network.obs_norm must be true or false, got 'maybe'"),
        (["agent=dqn", "env=cartpole", "env.id=FrozenLake-v1", "network=simba"],
         "FrozenLake-v1 has observations of shape (); network=simba takes flat vectors"),
        (["updates_per_step=abc"], "updates_per_step must be a number, got 'abc'"),
        (["agent=dqn", "env=minatar", "env.game=pong"], "MinAtar has no game 'pong'; its games are asterix, breakout"),
        (["agent=dqn", "env=atari", "env.game=Breakou"], "has no game 'Breakou'. Did you mean Breakout"),
        (["agent=dqn", "env=atari", "env.game=Backgammon"], "Backgammon has no NOOP action (its actions are FIRE, "
                                                             "RIGHT, LEFT), and the no-op starts press action 0 as one; "
                                                             "set env.kwargs.noop_max=0"),
        (["agent=dqn", "env=atari", "env.max_episode_steps=1000"], "env.max_episode_steps=1000 with "
                                                                    "env.kwargs.terminal_on_life_loss=true: a training "
                                                                    "episode is one life there"),
        (["agent=td3", "env=minatar"], "TD3 needs a continuous (Box) action space"),
        (["agent=sac", "env=atari"], "SAC needs a continuous (Box) action space"),
        (["agent=dqn", "env=minatar", "network=mlp"], "gives image observations of shape (10, 10, 4), but the network "
                                                      "(networks.mlp.mlp) is a dense one"),
        (["agent=dqn", "env=cartpole", "network=nature_cnn"], "is a convolutional one, for images (H, W, C), but "
                                                              "CartPole-v1 gives observations of shape (4,)"),
        (["agent=dqn", "env=minatar", "network=nature_cnn"], "network.convs layer 1 (4x4) does not fit its 1x1 input"),
        (["agent=dqn", "env=minatar", "network.convs=[[16,3]]"], "network.convs must be a non-empty list of [filters, "),
        (["agent=dqn", "env=minatar", "env.frame_stack=0"], "env.frame_stack must be an integer >= 1"),
        (["agent=dqn", "env=atari", "env.frame_stack=null"], "null on env=dmc: 3 with pixels, 1 from states), got None"),
        (["agent=dqn", "env=minatar", "network.obs_norm=true"], "network.obs_norm=true keeps running statistics of "
                                                                "vector observations"),
        (["agent=sac", "env=dmc", "env.domain=walkr"], "the DeepMind Control suite has no domain 'walkr'; its domains are "
                                                        "acrobot, ball_in_cup,"),
        (["agent=sac", "env=dmc", "env.domain=walker", "env.task=jump"], "the DeepMind Control domain 'walker' has no "
                                                                          "task 'jump'; its tasks are run, stand, walk"),
        (["agent=dqn", "env=dmc"], "DQN needs a discrete action space, but DMC-v1 has action space Box("),
        (["agent=sac", "env=dmc", "env.pixels=true"], "DMC-v1 gives image observations of shape (84, 84, 9), but the "
                                                      "network (networks.mlp.mlp) is a dense one"),
        (["agent=sac", "env=dmc", "env.action_repeat=0"], "env.action_repeat must be an integer >= 1 (or null: 2 with "
                                                          "pixels, 1 from states), got 0"),
        (["agent=dqn", "env=cartpole", "+network.random_shift=4"], "network.random_shift=4 shifts images, but this "
                                                                    "env's observations are vectors of shape (4,)"),
        (["agent=dqn", "env=minatar", "network.random_shift=-1"], "network.random_shift must be an integer >= 0"),
        (["agent=dqn", "env=cartpole", "eval_epsilon=2"], "eval_epsilon must be a number in [0, 1]"),
        (["eval_epsilon=0.05"], "eval_epsilon=0.05 takes random actions in evaluation, which is for discrete"),
        (["gamma=abc"], "gamma must be a number, got 'abc'"),
        (["agent=dqn", "env=cartpole", "buffer=prioritized", "buffer.alpha=abc"], "buffer.alpha must be a number"),
        (["seed=abc"], "seed must be an integer in [0, 2**31), got 'abc'"),
        (["seed=-1"], "seed must be an integer in [0, 2**31), got -1"),
        (["agent=sac", "agent.log_std=softplus"], "agent.log_std must be one of clip, tanh (clip: SB3's clamp"),
        (["agent=crossq", "agent.tanh_epsilon=-1"], "agent.tanh_epsilon must be a number in [0, 1e-2] (1e-06 in SB3 and "
                                                    "CleanRL: log(1 - a^2 + eps); 0: the exact log(1 - tanh(u)^2)), got -1"),
        (["+network.hiden=[64]"], "network.hiden: not a setting of networks.mlp.mlp, whose settings are"),
        (["+agent.lr=0.001"], "agent.lr: not a setting of agents.td3.TD3, whose settings are"),
        (["agent=mrq", "+agent.dyn_weigth=1"], "agent.dyn_weigth: not a setting of agents.mrq.MRQ, whose settings are obs_shape, "
                                               "network, rng, action_low, action_high, num_actions, target_update_every,"),
        (["speed.vectorization=threads"], "speed.vectorization must be sync or async, got 'threads'; set speed.vectorization=sync."),
        (["num_envs=0"], "num_envs must be a positive integer, got 0; set e.g. num_envs=1."),
        (["total_steps=abc"], "total_steps must be a positive integer, got 'abc'; set e.g. total_steps=1000."),
        (["train_at_episode_ends=maybe"], "train_at_episode_ends must be true or false, got 'maybe'"),
        (["train_at_episode_ends=true", "train_every=2"], "train_every=2 with training at episode ends"),
        *((["agent=td7", *override], message) for override, message in [
            (["buffer=uniform"], "agent.lap=true"),
            (["buffer=prioritized"], "this buffer weighs its samples by importance weights"),
            (["agent.lap=false"], "neither TD7 nor TD7 without LAP"),
            (["network=mlp"], "network=sale"),
            (["agent.policy_delay=0"], "policy_delay must be an integer >= 1"),
            (["network.encoder_hidden=0"], "encoder_hidden must be a positive integer"),
            (["agent.checkpoint_reset_weight=2"], "agent.checkpoint_reset_weight must be in (0, 1]"),
            (["num_envs=2"], "num_envs=2 with agent.checkpoints=true"),
            (["speed.batch_shards=2"], "with network=sale"),
            (["env=cartpole"], "TD7 needs a continuous (Box) action space"),
        ]),
        *((["agent=mrq", *override], message) for override, message in [
            (["network=mlp"], "agent=mrq builds its encoders, policy and value networks from network=mrq"),
            (["agent.num_bins=1"], "agent.num_bins must be an integer >= 2 (65 in MR.Q), got 1"),
            (["agent.enc_horizon=0"], "agent.enc_horizon must be an integer >= 1 (MR.Q: 5 for the encoder"),
            (["agent.lower=5", "agent.upper=1"], "agent.lower and agent.upper must be numbers with lower < upper"),
            (["buffer.n_step=1"], "the agent's value targets are 3-step returns (agent.q_horizon=3), but the buffer's "
                                  "are 1-step"),
            (["env=minatar"], "MR.Q's image encoder (3x3 convolutions at strides 2, 2, 2, 1) needs images of at least "
                              "31x31 pixels, got 10x10"),
            (["network.zs_dim=0"], "network.zs_dim must be a positive integer (512 in MR.Q), got 0"),
            (["agent.reward_loss=l1"], "agent.reward_loss must be one of two_hot, mse (the first is MR.Q's), got 'l1'"),
            (["agent.reward_scaling=maybe"], "agent.reward_scaling must be true or false, got 'maybe'"),
            (["network.linear_value=yes"], "network.linear_value must be true or false, got 'yes'"),
            (["agent.encoder_loss=both"], "agent.encoder_loss must be one of model, value (the first is MR.Q's)"),
            (["agent.encoder_loss=value", "network.linear_model=false"],
             "network.linear_model=false changes the encoder's model, which agent.encoder_loss=value"),
        ]),
        *((["agent=ga", "env=cartpole", "agent.population=8", "network.hidden=[8]", *override], message)
          for override, message in [
            (["agent.population=1"], "agent.population must be an integer >= 2"),
            (["agent.elites=8"], "agent.elites must be an integer in [0, population)"),
            (["agent.mutation_std=-0.1"], "agent.mutation_std must be a number >= 0"),
            (["buffer=prioritized"], "keeps no replay buffer"),
            (["agent.selection=best"], "agent.selection must be one of tournament, truncation"),
            (["env.id=FrozenLake-v1"], "takes flat vectors"),
            (["env=pendulum", "speed.env_in_graph=true"], "Pendulum-v1 (as configured) has no dynamics in TensorFlow"),
            (["speed.env_in_graph=maybe"], "speed.env_in_graph must be auto, true or false"),
        ]),
    ],
)
def test_bad_input_gets_a_clear_message_and_nonzero_exit(tmp_path, capsys, overrides, message):
    proc = train_in_process(capsys, f"hydra.run.dir={tmp_path / 'run'}", "logger.progress=false", *overrides)
    assert proc.returncode != 0
    assert message in proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
    assert not (tmp_path / "run").exists()  # a refused command leaves no run directory behind


@pytest.mark.parametrize(
    "overrides,message",
    [
        (["agent=a3c"], f"error: agent=a3c names no config in conf/agent/; the choices are {AGENT_CHOICES}."),
        (["agent=nosuchagent"], f"error: agent=nosuchagent names no config in conf/agent/; the choices are {AGENT_CHOICES}."),
        (["env=nosuchenv"], "error: env=nosuchenv names no config in conf/env/; the choices are acrobot, ant, "),
        (["env=pendullum"], "the choices are acrobot, ant, atari, cartpole, dmc, gridworld, halfcheetah, hopper, humanoid, "
                            "inverted_pendulum, minatar, mountaincar, pendulum, reacher, walker2d. Did you mean "
                            "env=pendulum?"),
        (["-m", "agent=td3,dqnn"], f"error: agent=dqnn names no config in conf/agent/; the choices are {AGENT_CHOICES}. "
                                   "Did you mean agent=dqn?"),
        # Hydra's own grammar, read by its parser: a choice() sweep and a quoted value
        (["-m", "agent=choice(td3, dqm)"], "error: agent=dqm names no config in conf/agent/"),
        (["env='pendullum'"], "error: env=pendullum names no config in conf/env/"),
    ],
)
def test_unknown_group_option_names_the_choices(tmp_path, capsys, overrides, message):
    proc = train_in_process(capsys, f"hydra.run.dir={tmp_path / 'run'}", *overrides)
    assert proc.returncode == 2
    assert message in proc.stderr
    assert "Traceback" not in proc.stderr and "Config search path" not in proc.stderr
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    "overrides,message",
    [
        (["agent=ppo", "agent.clip_range=0.1"], "`agent.clip_range=0.1`: agent=ppo has no setting 'clip_range'; clip_range "
                                                "is another toolkit's name (SB3's or CleanRL's) for agent.clip_coef here"),
        (["agent=ppo", "agent.batch_size=64"], "SB3's batch_size is a minibatch's size; here the rollout is cut into "
                                               "agent.num_minibatches"),
        (["agent=td3", "agent.batch_size=64"], "batch_size is not an agent setting here but the run's: set batch_size="),
        (["agent=sac", "agent.learning_rate=1e-3"], "here each has its own: agent.actor_lr, agent.critic_lr, agent.alpha_lr"),
        (["agent.tua=0.01"], "this agent (agent=td3, the default) has no setting 'tua'; did you mean agent.tau?"),
        (["-m", "agent=td3,sac", "agent.alpha_lr=1e-3"], "agent=td3 has no setting 'alpha_lr'"),  # each of a sweep's
    ],
)
def test_a_setting_the_agent_does_not_have_is_named_with_its_name_here(tmp_path, capsys, overrides, message):
    proc = train_in_process(capsys, f"hydra.run.dir={tmp_path / 'run'}", *overrides)
    assert proc.returncode == 2
    assert message in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr and "not in struct" not in proc.stderr
    assert not (tmp_path / "run").exists()


def test_the_printed_commands_paste_back_for_a_run_dir_with_a_space_and_a_comma(tmp_path):
    """The follow-up commands a run prints are quoted for the shell and for Hydra's grammar: pasted
    into a shell as printed, the `extend` command continues the run in its own directory."""
    import shlex

    from training.config import override

    run_dir = tmp_path / "my runs, (v1)"
    proc = subprocess.run([sys.executable, "train.py", *shlex.split(override("hydra.run.dir", run_dir)), "env=pendulum",
                           "total_steps=300", "learning_starts=200", "eval_every=300", "eval_episodes=1",
                           "batch_size=32", "network.hidden=[16,16]", "logger.progress=false"],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    extend = next(line for line in proc.stdout.splitlines() if "extend:" in line).split("extend:", 1)[1].strip()
    assert extend.startswith("python train.py ") and shlex.split(extend)[2] == f"resume='{run_dir}'"
    proc = subprocess.run(f"{shlex.quote(sys.executable)} {extend.removeprefix('python ')}", shell=True, cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads((run_dir / "summary.json").read_text())["steps"] == 600
