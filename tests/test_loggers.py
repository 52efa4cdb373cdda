"""What a run writes as it goes: CSV records (appended; a new column widens the file by replacing
it whole) and the pruning of old checkpoints."""
import csv
import glob
import json
import os
import subprocess
import sys

import numpy as np
from helpers import ROOT, RUN, read_csv, read_wandb_log

from training.loggers import CSVLogger


def rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_csv_appends_and_widens_by_replacing_the_file(tmp_path):
    log = CSVLogger(str(tmp_path))
    log.log("update", 100, {"updates": 0})
    path = tmp_path / "update.csv"
    inode = os.stat(path).st_ino
    log.log("update", 200, {"updates": 50})
    assert os.stat(path).st_ino == inode  # same columns: appended in place
    log.log("update", 300, {"updates": 100, "critic_loss": 0.5})  # a new column
    assert os.stat(path).st_ino != inode  # written to a temporary file that replaced the old one
    assert not os.path.exists(f"{path}.tmp")
    log.close()
    assert rows(path) == [{"step": "100", "updates": "0", "critic_loss": ""},
                          {"step": "200", "updates": "50", "critic_loss": ""},
                          {"step": "300", "updates": "100", "critic_loss": "0.5"}]
    # a new logger on the same run (a resume) appends under the existing header
    again = CSVLogger(str(tmp_path))
    again.log("update", 400, {"critic_loss": 0.25, "updates": 150})
    again.close()
    assert rows(path)[-1] == {"step": "400", "updates": "150", "critic_loss": "0.25"}
    assert len(rows(path)) == 4


def test_prune_keeps_the_newest_and_clears_what_a_killed_prune_left(tmp_path):
    from training.checkpoints import Checkpointer, list_checkpoints

    root = tmp_path / "checkpoints"
    for name, complete in [("step_0000000100", True), ("step_0000000200", False), ("step_0000000050.pruned", False),
                           ("step_0000000300", True), ("step_0000000400", True), ("best", True)]:
        (root / name).mkdir(parents=True)
        (root / name / "agent.index").write_text("x")
        if complete:
            (root / name / "meta.json").write_text("{}")
    Checkpointer(str(tmp_path), {}, keep=2)._prune()
    assert sorted(os.listdir(root)) == ["best", "step_0000000300", "step_0000000400"]
    assert sorted(list_checkpoints(str(tmp_path))) == [300, 400]


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
