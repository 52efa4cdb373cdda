"""The ecosystem's env ids (training/command_line.py): `env.id=ALE/Pong-v5`, Shimmy's
`dm_control/<domain>-<task>-v0` and MinAtar's `MinAtar/<Game>-v1` train as this project's groups
that mean them, with their frames and protocol; contradictions and sweeps of them are refused."""
import json

import pytest
from omegaconf import OmegaConf

from training.command_line import ecosystem_ids


@pytest.mark.parametrize("given,meant", [
    (["env.id=ALE/Pong-v5"], ["env=atari", "env.game=Pong"]),
    (["env.id=SpaceInvadersNoFrameskip-v4", "env=atari"], ["env=atari", "env.game=SpaceInvaders"]),
    (["env.id=dm_control/ball_in_cup-catch-v0"], ["env=dmc", "env.domain=ball_in_cup", "env.task=catch"]),
    (["env.id=MinAtar/SpaceInvaders-v1", "env.game=space_invaders"], ["env=minatar", "env.game=space_invaders"]),
])
def test_an_ecosystem_id_composes_as_the_group_that_means_it(make_cfg, given, meant):
    """The same config as the group's own command line, every key (the frames, the protocol)."""
    read = ecosystem_ids(["agent=dqn" if "atari" in meant[0] or "minatar" in meant[0] else "agent=td3", *given])
    assert read[1:] == meant
    assert OmegaConf.to_container(make_cfg(*read)) == OmegaConf.to_container(make_cfg(read[0], *meant))


def test_other_ids_and_command_lines_are_left_as_they_are():
    for argv in (["env.id=Hopper-v5"], ["env=atari", "env.game=Pong"], ["-m", "seed=0,1", "env.id=LunarLander-v3"]):
        assert ecosystem_ids(argv) == argv


def test_a_shimmy_task_id_trains_as_env_dmc(cli, tmp_path):
    run = tmp_path / "run"
    proc = cli.train(run, "env.id=dm_control/cheetah-run-v0", "agent=td3", "network.hidden=[8,8]", "total_steps=40",
                     "learning_starts=20", "batch_size=8", "eval_every=40", "eval_episodes=1", "logger.progress=false",
                     "checkpoint.every=0")
    assert proc.returncode == 0, proc.stderr[-3000:]
    cfg = OmegaConf.load(run / ".hydra" / "config.yaml")
    assert (cfg.env.id, cfg.env.domain, cfg.env.task) == ("DMC-v1", "cheetah", "run")
    assert json.loads((run / "summary.json").read_text())["steps"] == 40


@pytest.mark.parametrize("overrides,message", [
    (["env.id=ALE/Pong-v5", "env.game=Breakout"],
     "env.id=ALE/Pong-v5 means env=atari env.game=Pong, but the command line also says env.game=Breakout"),
    (["env.id=ALE/Pong-v5", "env=dmc"], "env.id=ALE/Pong-v5 is env=atari's, but the command line also says env=dmc"),
    (["-m", "env.id=ALE/Pong-v5,ALE/Breakout-v5"], "sweeps ecosystem ids; sweep the suite's own key instead"),
])
def test_an_ecosystem_id_that_the_command_line_contradicts_is_refused(cli, tmp_path, overrides, message):
    proc = cli.train(tmp_path / "run", "agent=dqn", *overrides)
    assert proc.returncode == 2 and message in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "run").exists()
