"""Videos follow the robot: the render camera of a locomotion task moves with the body the task
rewards. Rendering runs in a child process without TensorFlow (MuJoCo's EGL and TensorFlow do not
share a process; envs/video.py), so the checks run in one."""
import glob
import json
import os
import subprocess
import sys

import pytest
from helpers import evaluate

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CHILD = r"""
import json, os, sys
os.environ.setdefault("MUJOCO_GL", "egl")
sys.path.insert(0, os.getcwd())
import numpy as np
from envs.factory import make_env
from envs.video import camera_follower

def robot_pixels(img):  # the Ant's brown-orange (rgba 0.8 0.6 0.4) against the floor's green-white and black checks
    r, g, b = (img[..., i].astype(int) for i in range(3))
    return int(((r > g + 15) & (g > b + 15)).sum())

env = make_env("Ant-v5", seed=0, render_mode="rgb_array")
env.reset(seed=0)
follow = camera_follower(env)
follow()
start = robot_pixels(np.asarray(env.render()))
base = env.unwrapped
qpos = base.data.qpos.copy()
qpos[:2] += (30.0, -12.0)  # where a running ant is by the end of an episode
base.set_state(qpos, base.data.qvel.copy())
unfollowed = robot_pixels(np.asarray(env.render()))
follow()
followed = robot_pixels(np.asarray(env.render()))
kinds = {e: camera_follower(make_env(e, seed=0, render_mode="rgb_array")) is not None
         for e in ("HalfCheetah-v5", "Hopper-v5", "Reacher-v5", "InvertedPendulum-v5")}
print(json.dumps({"start": start, "unfollowed": unfollowed, "followed": followed, "kinds": kinds}))
"""


def test_the_camera_keeps_the_ant_in_view_wherever_it_runs():
    proc = subprocess.run([sys.executable, "-c", CHILD], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    r = json.loads(proc.stdout.strip().splitlines()[-1])
    assert r["start"] > 5000  # the ant fills a good part of the 480 x 480 frame at the start
    assert r["unfollowed"] == 0  # gymnasium's own camera stays behind: the ant is out of the frame
    assert abs(r["followed"] - r["start"]) < 0.1 * r["start"]  # followed, it is framed as at the start
    assert r["kinds"] == {"HalfCheetah-v5": True, "Hopper-v5": True, "Reacher-v5": False, "InvertedPendulum-v5": False}


FLOOR_CHILD = r"""
import json, os, sys
os.environ.setdefault("MUJOCO_GL", "egl")
sys.path.insert(0, os.getcwd())
import numpy as np
from envs.factory import make_env
from envs.video import camera_follower

def floor_pixels(img):  # the light checks of Ant's floor: green over red and blue (rgb 0.8 0.9 0.8 lit)
    r, g, b = (img[..., i].astype(int) for i in range(3))
    return int(((g > r + 8) & (g > b + 8)).sum())

def run(follow_floor):
    env = make_env("Ant-v5", seed=0, render_mode="rgb_array")
    env.reset(seed=0)
    base = env.unwrapped
    follow = camera_follower(env)
    qpos = base.data.qpos.copy()
    qpos[:2] += (92.0, -3.0)  # where a 300k-step TD3 ant ended its evaluation episode
    base.set_state(qpos, base.data.qvel.copy())
    if follow_floor:
        follow()
    else:  # the camera alone, as before the floor went along
        base.mujoco_renderer._get_viewer("rgb_array").cam.lookat[:2] = base.data.body("torso").xpos[:2]
    pixels = floor_pixels(np.asarray(env.render()))
    rng = np.random.default_rng(0)
    for _ in range(50):  # the physics: the same with the drawn floor moved
        env.step(rng.uniform(-1, 1, size=8))
    return pixels, base.data.qpos.tolist(), base.model.geom("floor").pos[:2].tolist()

with_floor, qpos_a, floor_a = run(True)
without, qpos_b, floor_b = run(False)
print(json.dumps({"with": with_floor, "without": without, "same_physics": qpos_a == qpos_b, "floor": floor_a}))
"""


def test_the_floor_goes_along_with_the_camera_without_changing_the_physics():
    """92 m out, past the 40 m of floor gymnasium's Ant draws, the floor is under the ant (moved by
    whole texture periods of 80/60 m), and the same actions give the same states bit for bit."""
    proc = subprocess.run([sys.executable, "-c", FLOOR_CHILD], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    r = json.loads(proc.stdout.strip().splitlines()[-1])
    assert r["without"] == 0 and r["with"] > 20000, r
    assert r["same_physics"], r
    period = 80.0 / 60.0
    assert abs(r["floor"][0] / period - round(r["floor"][0] / period)) < 1e-9 and abs(r["floor"][0] - 92.0) < period


@pytest.fixture(scope="module")
def ip_run(tmp_path_factory):
    """A short TD3 run on InvertedPendulum, an env MuJoCo renders headless."""
    run_dir = tmp_path_factory.mktemp("ip")
    proc = subprocess.run(
        [sys.executable, "train.py", f"hydra.run.dir={run_dir}", "env=inverted_pendulum", "total_steps=300",
         "learning_starts=100", "eval_every=1000", "eval_episodes=1", "batch_size=32", "network.hidden=[16,16]",
         "logger.trace_graph=true", "logger.progress=false"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return run_dir


def assert_mp4(path):
    with open(path, "rb") as f:
        head = f.read(12)
    assert head[4:8] == b"ftyp"
    import imageio.v2 as imageio

    frames = [frame for frame in imageio.get_reader(path)]
    assert len(frames) >= 2 and frames[0].shape[2] == 3 and frames[0].std() > 0


def test_video_is_a_valid_mp4(ip_run):
    proc = evaluate(f"run_dir={ip_run}", "episodes=1", "video=true")
    assert proc.returncode == 0, proc.stderr[-3000:]
    videos = glob.glob(str(ip_run / "eval" / "latest-episode0.mp4"))
    assert videos
    assert_mp4(videos[0])


def test_the_hub_model_folder_holds_the_card_config_weights_and_video_and_evaluates_as_a_run(ip_run, tmp_path):
    import numpy as np
    import tensorflow as tf
    import yaml

    proc = evaluate(f"run_dir={ip_run}", "episodes=3", "hub=true", f"out_dir={tmp_path / 'out'}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    folder = tmp_path / "out" / "hub" / "latest"
    with open(tmp_path / "out" / "eval" / "latest.json") as f:
        result = json.load(f)
    assert result["hub"] == str(folder)

    card = (folder / "README.md").read_text()
    _, front, body = card.split("---\n", 2)
    meta = yaml.safe_load(front)
    assert meta["library_name"] == "tfrl" and "InvertedPendulum-v5" in meta["tags"]
    (entry,) = meta["model-index"]
    assert entry["name"] == "TD3"
    (scored,) = entry["results"]
    assert scored["dataset"]["name"] == "InvertedPendulum-v5"
    assert scored["metrics"][0]["type"] == "mean_reward"
    assert scored["metrics"][0]["value"] == f"{result['return_mean']:.2f} +/- {result['return_std']:.2f}"
    with open(ip_run / "summary.json") as f:
        summary = json.load(f)
    assert "python train.py " + " ".join(summary["overrides"]) in body
    assert summary["code"]["commit"] in body and f"| tensorflow | {summary['versions']['tensorflow']} |" in body

    with open(folder / "results.json") as f:
        recorded = json.load(f)
    assert recorded["return_mean"] == result["return_mean"] and recorded["seed"] == 12345 and recorded["episodes"] == 3
    assert_mp4(folder / "replay.mp4")
    assert (folder / ".hydra" / "config.yaml").read_text() == (ip_run / ".hydra" / "config.yaml").read_text()
    assert not (folder / ".hydra" / "hydra.yaml").exists()  # it holds the training machine's paths
    (weights,) = (folder / "checkpoints").iterdir()
    assert sorted(p.name for p in weights.iterdir()) == ["agent.data-00000-of-00001", "agent.index", "meta.json"]

    policy = tf.saved_model.load(str(folder / "policy"))
    obs = np.random.default_rng(0).normal(size=(8, 4)).astype(np.float32)
    exported = tf.saved_model.load(str(tmp_path / "out" / "export" / "latest"))
    np.testing.assert_array_equal(policy(obs).numpy(), exported(obs).numpy())

    again = evaluate(f"run_dir={folder}", "episodes=3", f"out_dir={tmp_path / 'again'}")  # the folder is a run
    assert again.returncode == 0, again.stderr[-3000:]
    with open(tmp_path / "again" / "eval" / "latest.json") as f:
        assert json.load(f)["return_mean"] == result["return_mean"]
