"""Runs that last: checkpoints, exact resume after SIGTERM and SIGKILL, evaluate.py, export,
TensorBoard and W&B records. Each test trains through the real train.py in a subprocess."""
import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from helpers import ROOT, evaluate, final_weights, read_csv, read_wandb_log, resume  # noqa: F401 (shared)

# A short deterministic TD3 run on Pendulum: 200 random steps, then 400 steps with updates.
RUN = ["env=pendulum", "total_steps=600", "learning_starts=200", "eval_every=200", "eval_episodes=2",
       "batch_size=64", "network.hidden=[32,32]", "logger.every=100", "checkpoint.every=200", "checkpoint.keep=2", "deterministic=true",
       "logger.trace_graph=true", "logger.progress=false"]


def train(run_dir, *overrides, timeout=600):
    cmd = [sys.executable, "train.py", f"hydra.run.dir={run_dir}", *RUN, *overrides]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The uninterrupted run every resumed run must reproduce."""
    run_dir = tmp_path_factory.mktemp("reference")
    proc = train(run_dir)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return run_dir


def test_checkpoints_are_complete_and_pruned(reference):
    # periodic at 200 and 400, final at 600; keep=2 pruned the oldest; best is kept apart
    assert sorted(os.listdir(reference / "checkpoints")) == ["best", "step_0000000400", "step_0000000600"]
    for d in glob.glob(str(reference / "checkpoints" / "step_*")):
        meta = json.load(open(os.path.join(d, "meta.json")))
        assert set(meta["files"]) >= {"agent.index", "buffer.npz", "state.json", "state.npz"}
        assert meta["versions"] == json.loads((reference / "summary.json").read_text())["versions"]
    assert not glob.glob(str(reference / "checkpoints" / "*.tmp"))


def test_a_run_records_the_commit_and_the_library_versions_that_made_it(reference):
    """summary.json (and each checkpoint's meta.json, above) name the project's commit, whether its
    tracked files had changes, and the versions of Python and the libraries behind the numbers."""
    import platform
    import subprocess

    import gymnasium
    import mujoco
    import tensorflow as tf

    summary = json.loads((reference / "summary.json").read_text())
    versions = summary["versions"]
    assert (versions["python"], versions["tensorflow"], versions["gymnasium"], versions["mujoco"]) == (
        platform.python_version(), tf.__version__, gymnasium.__version__, mujoco.__version__)
    assert {"keras", "numpy", "dm-control", "ale-py"} <= set(versions) and all(versions.values())
    head = subprocess.run(["git", "-C", ROOT, "rev-parse", "HEAD"], capture_output=True, text=True)
    if head.returncode == 0:  # a git checkout (CI's is)
        assert summary["code"]["commit"] == head.stdout.strip() and isinstance(summary["code"]["dirty"], bool)


def test_tensorboard_events_hold_the_named_scalars(reference):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(reference / "tb"), size_guidance={"tensors": 0})
    acc.Reload()
    tags = set(acc.Tags()["tensors"])
    assert {"train/episode_return", "train/episode_length", "eval/return_mean", "eval/return_std",
            "update/critic_loss", "update/actor_loss", "update/q1", "update/steps_per_second"} <= tags
    evals = [(e.step, float(np.asarray(tf_value(e)))) for e in acc.Tensors("eval/return_mean")]
    csv_evals = [(int(r["step"]), float(r["return_mean"])) for r in read_csv(reference / "eval.csv")]
    assert [s for s, _ in evals] == [s for s, _ in csv_evals] == [0, 200, 400, 600]
    np.testing.assert_allclose([v for _, v in evals], [v for _, v in csv_evals], rtol=1e-6)


def test_tensorboard_holds_the_compiled_update_graph(reference):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(reference / "tb"))
    acc.Reload()
    graph = acc.Graph()
    # the graph's own ops and those of the functions it calls (the delayed step is a cond branch)
    ops = {node.op for node in graph.node} | {node.op for f in graph.library.function for node in f.node_def}
    required = {
        "MatMul", "Relu", "ReluGrad",  # the critics' forward and backward passes
        "Tanh", "TanhGrad",  # the actors' forward passes, and the actor's gradient: the actor step
        "Minimum",  # min(Q1', Q2'), and the clip of the smoothing noise
        "Sqrt", "AssignSubVariableOp",  # Adam's steps
        "AssignVariableOp",  # the targets' Polyak averaging
        "AssignAddVariableOp",  # the update counter of the policy delay
    }
    assert required <= ops, sorted(required - ops)
    assert ops & {"If", "StatelessIf"}, "no conditional: the policy delay's actor and target step"
    normal = {"StatelessRandomNormalV2", "StatelessRandomNormal", "RandomStandardNormal", "StatefulStandardNormalV2"}
    assert ops & normal, "no normal sampler: the target smoothing noise"
    assert len(graph.node) > 100


def tf_value(event):
    import tensorflow as tf

    return tf.make_ndarray(event.tensor_proto)


LONG = "total_steps=2000"  # long enough after the first checkpoint that a signal lands mid-run


@pytest.fixture(scope="module")
def long_reference(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("long_reference")
    proc = train(run_dir, LONG)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return run_dir


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_to_the_process_group_stops_async_envs_at_a_checkpoint(tmp_path, sig):
    """Ctrl-C in a terminal (or a cluster's SIGTERM) reaches the env workers too: the run must still
    stop at a checkpoint and say how to resume, not die in a worker's KeyboardInterrupt."""
    run_dir = tmp_path / "run"
    proc = subprocess.Popen(
        [sys.executable, "train.py", f"hydra.run.dir={run_dir}", *RUN, LONG, "num_envs=2", "speed.vectorization=async"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )
    deadline = time.time() + 300
    while time.time() < deadline and not glob.glob(str(run_dir / "checkpoints" / "step_0000000200")):
        time.sleep(0.1)
    time.sleep(0.3)
    assert proc.poll() is None, "run finished before it could be interrupted"
    os.killpg(proc.pid, sig)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 128 + sig, err[-3000:]
    assert f"stopped by {signal.Signals(sig).name}" in out and f"resume={run_dir}" in out
    assert "Traceback" not in err
    steps = sorted(int(os.path.basename(p)[5:]) for p in glob.glob(str(run_dir / "checkpoints" / "step_*")))
    assert steps[-1] > 200  # the stop checkpoint, past the periodic one


def lock_holder(run_dir):
    """The pid that run.lock names, or None (no file yet, or its record half written)."""
    try:
        return json.loads((run_dir / "run.lock").read_text()).get("pid")
    except (FileNotFoundError, ValueError):
        return None


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_resume_after_kill_reproduces_the_uninterrupted_run(tmp_path, long_reference, sig):
    reference = long_reference
    run_dir = tmp_path / "run"
    proc = subprocess.Popen(
        [sys.executable, "train.py", f"hydra.run.dir={run_dir}", *RUN, LONG], cwd=ROOT,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    # wait until the run is past its first periodic checkpoint, then kill it mid-run
    deadline = time.time() + 300
    while time.time() < deadline and not glob.glob(str(run_dir / "checkpoints" / "step_0000000200")):
        time.sleep(0.1)
    time.sleep(0.3)
    assert proc.poll() is None, "run finished before it could be interrupted"
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=300)
    if sig == signal.SIGTERM:
        assert proc.returncode == 128 + signal.SIGTERM, err[-3000:]
        assert "stopped by SIGTERM" in out and f"resume={run_dir}" in out
    else:
        assert proc.returncode == -signal.SIGKILL
        # the killed run's hold is stale: its record is left, its lock went with the process
        assert lock_holder(run_dir) == proc.pid
    assert not os.path.exists(run_dir / "summary.json")

    # two resumes at once: the one that comes second is refused, naming the first, and writes nothing
    first = subprocess.Popen([sys.executable, "train.py", f"resume={run_dir}"], cwd=ROOT,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    while time.time() < deadline and lock_holder(run_dir) != first.pid:
        time.sleep(0.1)
    listing = sorted(os.listdir(run_dir / "checkpoints"))
    second = resume(run_dir)
    assert second.returncode == 2, second.stderr[-3000:]
    assert f"being written by another live process (pid {first.pid} on" in second.stderr
    assert "Traceback" not in second.stderr
    assert first.poll() is None, "the first resume ended before the second one tried"
    assert set(listing) <= set(os.listdir(run_dir / "checkpoints"))
    out, err = first.communicate(timeout=600)
    assert first.returncode == 0, err[-3000:]
    assert "resumed" in out and not (run_dir / "run.lock").exists()
    ref, res = final_weights(reference), final_weights(run_dir)
    assert ref.keys() == res.keys() and len(ref) > 10
    for k in ref:
        np.testing.assert_array_equal(ref[k], res[k], err_msg=k)
    def evals(d):  # everything but the wall clock
        return [{k: v for k, v in r.items() if k != "wall_time"} for r in read_csv(d / "eval.csv")]

    assert evals(run_dir) == evals(reference)
    ref_summary = json.loads((reference / "summary.json").read_text())
    res_summary = json.loads((run_dir / "summary.json").read_text())
    assert res_summary["final_return"] == ref_summary["final_return"]
    assert res_summary["updates"] == ref_summary["updates"] == 1800


def test_restored_buffer_equals_the_saved_one(reference):
    from buffers.uniform import UniformReplay
    from training.checkpoints import resolve_checkpoint

    path = resolve_checkpoint(str(reference), "latest")
    with np.load(os.path.join(path, "buffer.npz")) as z:
        saved = {k: z[k] for k in z.files}
    buf = UniformReplay(int(saved["capacity"]), 3, 1, 0.99, np.random.default_rng(0))
    buf.load_state_dict(saved)
    assert len(buf) == 600
    np.testing.assert_array_equal(buf.state_dict()["data"], saved["data"])
    # consecutive stored transitions chain up inside an episode
    np.testing.assert_array_equal(buf.field("next_obs")[:199], buf.field("obs")[1:200])


def test_resume_refuses_a_finished_run_without_a_larger_total(tmp_path, reference, cli):
    before = sorted(os.listdir(reference / "checkpoints"))
    proc = cli.resume(reference)
    assert proc.returncode == 2
    assert "already reached 600 steps" in proc.stderr and "total_steps=" in proc.stderr
    assert sorted(os.listdir(reference / "checkpoints")) == before
    proc = cli.resume(reference, "batch_size=32")
    assert proc.returncode == 2 and "batch_size=32 cannot be" in proc.stderr


def test_a_new_run_never_prunes_another_runs_checkpoints(reference):
    before = sorted(os.listdir(reference / "checkpoints"))
    saved = {name: (reference / ".hydra" / name).read_bytes() for name in os.listdir(reference / ".hydra")}
    proc = train(reference, "agent=ddpg")
    assert proc.returncode == 2 and "already holds a run" in proc.stderr and f"resume={reference}" in proc.stderr
    # refused before Hydra writes: the run's saved config, which resume and evaluate.py rebuild it from, is intact
    assert {name: (reference / ".hydra" / name).read_bytes() for name in os.listdir(reference / ".hydra")} == saved
    assert sorted(os.listdir(reference / "checkpoints")) == before


def test_resume_extends_a_finished_run(tmp_path, reference):
    run_dir = tmp_path / "extended"
    shutil.copytree(reference, run_dir)
    proc = resume(run_dir, "total_steps=800", f"hydra.run.dir={tmp_path / 'hydra_dir'}")
    assert not (tmp_path / "hydra_dir").exists()  # resume continues in the run's dir: Hydra's own is removed
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert [int(r["step"]) for r in read_csv(run_dir / "eval.csv")] == [0, 200, 400, 600, 800]
    assert json.loads((run_dir / "summary.json").read_text())["steps"] == 800
    # the summary of the run as it first finished is kept aside, not left to describe the extension
    assert json.loads((run_dir / "summary_600.json").read_text())["steps"] == 600


def test_evaluate_prints_and_writes_json(reference):
    proc = evaluate(f"run_dir={reference}", "episodes=3", "checkpoint=best")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "return mean" in proc.stdout
    result = json.loads((reference / "eval" / "best.json").read_text())
    assert result["episodes"] == 3 and result["checkpoint"] == "best"
    assert result["return_min"] <= result["return_mean"] <= result["return_max"]
    proc = evaluate(f"run_dir={reference}", "episodes=2", "checkpoint=600")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads((reference / "eval" / "600.json").read_text())["checkpoint_step"] == 600


def test_a_run_directory_evaluate_cannot_write_is_refused_before_the_work_and_out_dir_takes_the_results(
        tmp_path, reference):
    """A run directory evaluate.py cannot write in (a read-only or shared mount; here its eval/ is a
    file, which no user can write under) is refused before any episode, with the setting that helps;
    with out_dir the results, videos and export go there and the run directory is only read."""
    import shutil

    run = tmp_path / "run"
    shutil.copytree(reference, run)
    shutil.rmtree(run / "eval", ignore_errors=True)
    (run / "eval").write_text("not a directory")
    before = sorted(str(p.relative_to(run)) for p in run.rglob("*"))
    proc = evaluate(f"run_dir={run}", "episodes=1")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert f"cannot write the evaluation's results to {run / 'eval'}" in proc.stderr and "out_dir=" in proc.stderr
    assert "return mean" not in proc.stdout
    out = tmp_path / "elsewhere"
    proc = evaluate(f"run_dir={run}", "episodes=1", "export=true", f"out_dir={out}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"written: {out / 'eval' / 'latest.json'}" in proc.stdout
    assert json.loads((out / "eval" / "latest.json").read_text())["episodes"] == 1
    assert (out / "export" / "latest" / "saved_model.pb").exists()
    assert sorted(str(p.relative_to(run)) for p in run.rglob("*")) == before  # read, never written


def test_latest_checkpoint_evaluates_like_the_training_run(reference):
    """The final checkpoint, evaluated with the training run's eval seed, gives its final return."""
    proc = evaluate(f"run_dir={reference}", "episodes=2", "seed=100")  # training evals use seed + 100
    assert proc.returncode == 0, proc.stderr[-3000:]
    final = float(read_csv(reference / "eval.csv")[-1]["return_mean"])
    assert json.loads((reference / "eval" / "latest.json").read_text())["return_mean"] == pytest.approx(final, rel=1e-4)


def test_exported_savedmodel_acts_like_the_agent(reference):
    import tensorflow as tf

    proc = evaluate(f"run_dir={reference}", "episodes=1", "export=true")
    assert proc.returncode == 0, proc.stderr[-3000:]
    policy = tf.saved_model.load(str(reference / "export" / "latest"))
    obs = np.random.default_rng(0).normal(size=(16, 3)).astype(np.float32)
    exported = policy(obs).numpy()
    served = policy.signatures["serving_default"](obs=tf.constant(obs))["action"].numpy()
    np.testing.assert_array_equal(served, exported)

    from omegaconf import OmegaConf

    from training.builder import build_learner
    from training.checkpoints import Checkpointer, resolve_checkpoint
    from training.builder import describe
    import gymnasium as gym

    cfg = OmegaConf.load(reference / ".hydra" / "config.yaml")
    OmegaConf.resolve(cfg)
    env = gym.make("Pendulum-v1")
    agent = build_learner(cfg, env.observation_space, env.action_space, np.random.default_rng(0))
    Checkpointer(str(reference), agent.trackables(), describe=describe(cfg)).restore(
        resolve_checkpoint(str(reference), "latest"), agent_only=True)
    agent.refresh()
    np.testing.assert_allclose(exported, agent.act(obs, explore=False), rtol=1e-5, atol=1e-6)
    assert np.all(np.abs(exported) <= 2.0)


def test_video_is_a_valid_mp4(tmp_path):
    run_dir = tmp_path / "ip"
    proc = subprocess.run(
        [sys.executable, "train.py", f"hydra.run.dir={run_dir}", "env=inverted_pendulum", "total_steps=300",
         "learning_starts=100", "eval_every=1000", "eval_episodes=1", "batch_size=32", "network.hidden=[16,16]",
         "logger.trace_graph=true", "logger.progress=false"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    proc = evaluate(f"run_dir={run_dir}", "episodes=1", "video=true")
    assert proc.returncode == 0, proc.stderr[-3000:]
    videos = glob.glob(str(run_dir / "eval" / "latest-episode0.mp4"))
    assert videos
    with open(videos[0], "rb") as f:
        head = f.read(12)
    assert head[4:8] == b"ftyp"
    import imageio.v2 as imageio

    reader = imageio.get_reader(videos[0])
    frames = [frame for frame in reader]
    assert len(frames) >= 2 and frames[0].shape[2] == 3 and frames[0].std() > 0


def test_wandb_offline_run_holds_config_and_metrics(tmp_path):
    run_dir = tmp_path / "wb"
    proc = subprocess.run(
        [sys.executable, "train.py", f"hydra.run.dir={run_dir}", *RUN[:-3], "total_steps=300", "checkpoint.every=0",
         "logger.wandb=true", "wandb.mode=offline", "wandb.project=tfrl-test"],
        cwd=ROOT, capture_output=True, text=True, timeout=600, env={**os.environ, "WANDB_MODE": "offline"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    files = glob.glob(str(run_dir / "wandb" / "offline-run-*" / "run-*.wandb"))
    assert len(files) == 1
    from wandb.proto import wandb_internal_pb2

    config, history = {}, []
    for data in read_wandb_log(files[0]):
        rec = wandb_internal_pb2.Record()
        rec.ParseFromString(data)
        if rec.WhichOneof("record_type") == "run":  # the config travels with the run record
            config.update({u.key: u.value_json for u in rec.run.config.update})
        elif rec.WhichOneof("record_type") == "config":
            config.update({u.key: u.value_json for u in rec.config.update})
        elif rec.WhichOneof("record_type") == "history":
            history.append({i.key or "/".join(i.nested_key): i.value_json for i in rec.history.item})
    assert json.loads(config["total_steps"]) == 300 and json.loads(config["agent"])["_target_"] == "agents.td3.TD3"
    summary = json.loads((run_dir / "summary.json").read_text())  # what `auto` decided, beside the config's "auto"
    decided = ("batch_shards", "steps_per_call", "inter_op_threads", "intra_op_threads")
    assert json.loads(config["speed"]) == {**json.loads(config["speed"]), **{k: summary[k] for k in decided}}
    assert json.loads(config["speed"])["compile"] == "graph"  # the group's settings, with what `auto` decided
    keys = set().union(*history)
    assert {"eval/return_mean", "train/episode_return", "update/critic_loss", "global_step"} <= keys
    eval_steps = [json.loads(h["global_step"]) for h in history if "eval/return_mean" in h]
    assert eval_steps == [0, 200, 300]


@pytest.mark.parametrize("damage", ["truncate", "flip"])
def test_corrupt_checkpoint_is_rejected_and_left_in_place(tmp_path, reference, damage, cli):
    run_dir = tmp_path / "corrupt"
    shutil.copytree(reference, run_dir)
    latest = sorted(glob.glob(str(run_dir / "checkpoints" / "step_*")))[-1]
    target = glob.glob(os.path.join(latest, "agent.data-*"))[0]
    data = open(target, "rb").read()
    with open(target, "wb") as f:
        f.write(data[: len(data) // 2] if damage == "truncate" else data[:100] + bytes([data[100] ^ 0xFF]) + data[101:])
    listing = sorted(os.listdir(run_dir / "checkpoints"))
    for proc in (cli.resume(run_dir, "total_steps=800"), cli.evaluate(f"run_dir={run_dir}")):
        assert proc.returncode == 2
        assert "is corrupt" in proc.stderr and "Traceback" not in proc.stderr
    assert sorted(os.listdir(run_dir / "checkpoints")) == listing


class RunsCode:
    """A pickle that, when loaded, creates the file `marker`: a stand-in for any command."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def plant(checkpoint, name, data):
    """Write `data` to `checkpoint/name` and its SHA-256 into meta.json, as a tamperer would."""
    import hashlib

    (checkpoint / name).write_bytes(data)
    meta = json.loads((checkpoint / "meta.json").read_text())
    meta["files"][name] = hashlib.sha256(data).hexdigest()
    (checkpoint / "meta.json").write_text(json.dumps(meta))


@pytest.mark.parametrize("layout", ["new", "old"])
def test_a_tampered_checkpoint_runs_no_code_on_resume_or_evaluate(tmp_path, reference, layout):
    """A run directory whose state.pkl was replaced with a pickle that runs code, checksums rewritten
    to match. Today's checkpoints never open a pickle; one of the old layout (state.pkl, no
    state.json) is refused on resume, its files untouched, and
    evaluate.py needs only the agent's weights."""
    import pickle

    run_dir = tmp_path / "tampered"
    shutil.copytree(reference, run_dir)
    marker = tmp_path / "code_ran"
    latest = Path(sorted(glob.glob(str(run_dir / "checkpoints" / "step_*")))[-1])
    if layout == "old":
        meta = json.loads((latest / "meta.json").read_text())
        for name in ("state.json", "state.npz"):
            (latest / name).unlink()
            del meta["files"][name]
        (latest / "meta.json").write_text(json.dumps(meta))
    plant(latest, "state.pkl", pickle.dumps({"loop": RunsCode(marker)}))
    before = {p: p.read_bytes() for p in (run_dir / "checkpoints").rglob("*") if p.is_file()}

    proc = evaluate(f"run_dir={run_dir}", "episodes=1")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert not marker.exists()
    proc = resume(run_dir, "total_steps=800")
    assert not marker.exists()
    if layout == "new":
        assert proc.returncode == 0, proc.stderr[-3000:]
    else:
        assert proc.returncode == 2 and "never loads one" in proc.stderr
        assert "Traceback" not in proc.stderr
        assert {p: p.read_bytes() for p in (run_dir / "checkpoints").rglob("*") if p.is_file()} == before


def test_a_saved_config_may_only_instantiate_the_projects_classes(tmp_path, reference):
    """`_target_` names any callable: a run directory whose config was altered to name another one
    is refused by resume and evaluate before anything is built, its files untouched."""
    run_dir = tmp_path / "altered"
    shutil.copytree(reference, run_dir)
    cfg_path = run_dir / ".hydra" / "config.yaml"
    text = cfg_path.read_text()
    assert "_target_: agents.td3.TD3" in text
    for target in ("os.system", "agents.td3.os.system"):
        cfg_path.write_text(text.replace("_target_: agents.td3.TD3", f"_target_: {target}"))
        before = {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}
        for proc in (resume(run_dir, "total_steps=800"), evaluate(f"run_dir={run_dir}")):
            assert proc.returncode == 2, proc.stderr[-3000:]
            assert f"agent._target_='{target}', which is not one of this project's classes" in proc.stderr
            assert "Traceback" not in proc.stderr
        assert {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()} == before


@pytest.mark.parametrize("part", ["agent", "buffer", "state"])
def test_a_checkpoint_that_does_not_fit_the_agent_is_refused(tmp_path, reference, part, cli):
    """Arrays of the wrong shapes in a checkpoint with matching checksums (a checkpoint of a
    16-16 network copied over a 32-32 run's, a buffer of another observation size, a loop state
    with a field this version does not have): a clear error, exit 2, the run's files unchanged."""
    import numpy as np

    run_dir = tmp_path / "mismatch"
    shutil.copytree(reference, run_dir)
    latest = Path(sorted(glob.glob(str(run_dir / "checkpoints" / "step_*")))[-1])
    if part == "agent":
        small = tmp_path / "small"
        proc = train(small, "network.hidden=[16,16]", "total_steps=300", "checkpoint.every=0")
        assert proc.returncode == 0, proc.stderr[-3000:]
        src = Path(sorted(glob.glob(str(small / "checkpoints" / "step_*")))[-1])
        for f in src.glob("agent.*"):
            plant(latest, f.name, f.read_bytes())
        message = "does not fit this agent"
    elif part == "buffer":
        with np.load(latest / "buffer.npz") as npz:
            arrays = {k: npz[k] for k in npz.files}
        arrays["data"] = arrays["data"][:, :-1]  # rows one number narrower than this run's transitions
        np.savez(tmp_path / "b.npz", **arrays)
        plant(latest, "buffer.npz", (tmp_path / "b.npz").read_bytes())
        message = "buffer"
    else:
        doc = json.loads((latest / "state.json").read_text())
        doc["loop"]["exec"] = 1
        plant(latest, "state.json", json.dumps(doc).encode())
        message = "fields this run does not have (['exec'])"
    before = {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}
    proc = cli.resume(run_dir, "total_steps=800")
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert message in proc.stderr and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()} == before


def test_bad_run_dirs_and_foreign_checkpoints(tmp_path, reference, cli):
    evaluate, resume = cli.evaluate, cli.resume
    proc = evaluate(f"run_dir={tmp_path / 'nope'}")
    assert proc.returncode == 2 and "does not exist" in proc.stderr
    for args, message in [((), "no run given"), ((f"run_dir={reference}", "episodes=abc"), "episodes must be a positive integer"),
                          ((f"run_dir={reference}", "episodes=0"), "episodes must be a positive integer, got 0"),
                          ((f"run_dir={reference}", "video=maybe"), "video must be true or false, got 'maybe'")]:
        proc = evaluate(*args)
        assert proc.returncode == 2 and message in proc.stderr and "Traceback" not in proc.stderr
    empty = tmp_path / "empty"
    shutil.copytree(reference, empty)
    shutil.rmtree(empty / "checkpoints")
    proc = evaluate(f"run_dir={empty}")
    assert proc.returncode == 2 and "no complete checkpoint" in proc.stderr
    proc = resume(empty, "total_steps=800")
    assert proc.returncode == 2 and "no complete checkpoint" in proc.stderr
    # a checkpoint written by another network size
    other = tmp_path / "other"
    shutil.copytree(reference, other)
    cfg_path = other / ".hydra" / "config.yaml"
    cfg_path.write_text(cfg_path.read_text().replace("- 32\n  - 32", "- 64\n  - 64"))
    proc = evaluate(f"run_dir={other}")
    assert proc.returncode == 2 and "network" in proc.stderr and "Traceback" not in proc.stderr


def test_wandb_without_network_warns_and_records_offline(tmp_path):
    """W&B pointed at a closed port on this machine (no server, as with no network) must not fail
    the training: a warning, then an offline run."""
    run_dir = tmp_path / "wb_nonet"
    env = {k: v for k, v in os.environ.items() if k != "WANDB_MODE"}
    env.update(WANDB_BASE_URL="http://127.0.0.1:9", WANDB_API_KEY="0" * 40)
    proc = subprocess.run(
        [sys.executable, "train.py", f"hydra.run.dir={run_dir}", *RUN[:-3], "total_steps=300", "checkpoint.every=0",
         "logger.wandb=true", "wandb.init_timeout=4"],
        cwd=ROOT, capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "W&B could not start online" in proc.stdout + proc.stderr
    assert len(glob.glob(str(run_dir / "wandb" / "offline-run-*" / "run-*.wandb"))) == 1
    assert json.loads((run_dir / "summary.json").read_text())["steps"] == 300
