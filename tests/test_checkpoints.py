"""Checkpoints: complete and pruned, the buffer restored as saved, and a damaged, tampered, foreign or
unfitting checkpoint refused with its files left in place. Runs train through the real train.py in a
subprocess (the shared `reference` run of conftest.py)."""
import glob
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
from helpers import evaluate, resume, train


def test_checkpoints_are_complete_and_pruned(reference):
    # periodic at 200 and 400, final at 600; keep=2 pruned the oldest; best is kept apart
    assert sorted(os.listdir(reference / "checkpoints")) == ["best", "step_0000000400", "step_0000000600"]
    for d in glob.glob(str(reference / "checkpoints" / "step_*")):
        meta = json.load(open(os.path.join(d, "meta.json")))
        assert set(meta["files"]) >= {"agent.index", "buffer.npz", "state.json", "state.npz"}
        assert meta["versions"] == json.loads((reference / "summary.json").read_text())["versions"]
    assert not glob.glob(str(reference / "checkpoints" / "*.tmp"))


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


def test_a_new_run_never_prunes_another_runs_checkpoints(reference):
    before = sorted(os.listdir(reference / "checkpoints"))
    saved = {name: (reference / ".hydra" / name).read_bytes() for name in os.listdir(reference / ".hydra")}
    proc = train(reference, "agent=ddpg")
    assert proc.returncode == 2 and "already holds a run" in proc.stderr and f"resume={reference}" in proc.stderr
    # refused before Hydra writes: the run's saved config, which resume and evaluate.py rebuild it from, is intact
    assert {name: (reference / ".hydra" / name).read_bytes() for name in os.listdir(reference / ".hydra")} == saved
    assert sorted(os.listdir(reference / "checkpoints")) == before


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
                          ((f"run_dir={reference}", "video=maybe"), "video must be true or false, got 'maybe'"),
                          ((f"run_dir={reference}", "hub=1"), "hub must be true or false, got 1")]:
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
