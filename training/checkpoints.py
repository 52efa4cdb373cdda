"""Checkpoints: the whole resumable state of a run, written atomically.

A checkpoint is a directory `<run_dir>/checkpoints/step_<step>/` holding
    agent.index, agent.data-*   networks, targets, optimizer slots, counters, in-graph RNG
                                (tf.train.Checkpoint over the agent's trackables)
    buffer.npz                  the replay buffer with its cursor (when saving it is on)
    state.json, state.npz       loop state, numpy/Python RNG states, the training envs, as plain data
                                (`training.plaindata`: JSON and arrays read without pickle)
    meta.json                   step, what wrote it, and a SHA-256 of every file above
Loading one executes no code: TensorFlow's checkpoint holds tensors, the buffer and the state are
arrays read with `allow_pickle=False` and JSON. Checkpoints written before this format hold the
state as `state.pkl`, a pickle; unpickling runs whatever code the file names, so no version
loads it: resume refuses such a checkpoint, and evaluate.py, which needs only the agent, evaluates
it. The checksums catch corruption, not a tampered directory.
A restore maps buffer.npz's large arrays instead of reading them (`npz_arrays`): the replay buffer
copies them into its own preallocated rows, so a multi-GB buffer is never held twice in memory.
It is assembled under a temporary name and renamed into place (atomic on POSIX), and meta.json
is written last, so a crash mid-write leaves at most an ignored `*.tmp` directory and the previous
checkpoints usable. `best/` holds the checkpoint with the best evaluation return so far.

Why not tf.train.CheckpointManager alone: it rotates the TensorFlow files only, while a resumable
state also needs the buffer, the envs and the RNGs next to them, committed as one unit.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import struct
import time
import zipfile
from typing import Any

import numpy as np

from training import plaindata
from training.config import override
from training.faults import WRITE_FAULTS, write_failure
from training.provenance import provenance
from training.resume import described_today

STEP_DIR = re.compile(r"^step_(\d+)$")


class CheckpointError(RuntimeError):
    """A checkpoint that is missing, incomplete, corrupt or does not fit this run."""


class CheckpointWriteError(RuntimeError):
    """A checkpoint that could not be written for a fault of the machine (a full disk); its
    partial directory is removed, and the message names the last whole checkpoint."""


def _write_fault(err: BaseException, path: str) -> OSError | None:
    """`err` as the OSError of a machine's write fault (WRITE_FAULTS), or None if it is another
    error. TensorFlow reports a full disk as ResourceExhaustedError, with the OS's text in it."""
    if isinstance(err, OSError):
        if err.errno not in WRITE_FAULTS:
            return None
        return err if err.filename else OSError(err.errno, err.strerror, path)
    if type(err).__module__.startswith("tensorflow"):
        for code in sorted(WRITE_FAULTS):
            if os.strerror(code) in str(err):
                return OSError(code, os.strerror(code), path)
    return None


def _sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 22), b""):
            h.update(chunk)
    return h.hexdigest()


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def list_checkpoints(run_dir: str) -> dict[int, str]:
    """Complete periodic checkpoints of a run by step (directories with meta.json)."""
    root = os.path.join(run_dir, "checkpoints")
    found = {}
    if os.path.isdir(root):
        for name in os.listdir(root):
            m = STEP_DIR.match(name)
            if m and os.path.exists(os.path.join(root, name, "meta.json")):
                found[int(m.group(1))] = os.path.join(root, name)
    return dict(sorted(found.items()))


def latest_values(run_dir: str) -> dict[str, Any]:
    """The values of the agent's variables in the run's latest complete checkpoint, by name: not the
    optimizers' slots, the save counter or the object graph (whose names count the optimizers the
    process made before it). Two runs whose values are equal ended in the same state."""
    import tensorflow as tf

    found = list_checkpoints(run_dir)
    if not found:
        raise FileNotFoundError(f"{run_dir} has no complete checkpoint")
    reader = tf.train.load_checkpoint(os.path.join(found[max(found)], "agent"))
    return {k: reader.get_tensor(k) for k in sorted(reader.get_variable_to_shape_map())
            if "OPTIMIZER_SLOT" not in k and "save_counter" not in k and k != "_CHECKPOINTABLE_OBJECT_GRAPH"}


def resolve_checkpoint(run_dir: str, which: str | int = "latest") -> str:
    """The directory of checkpoint `latest`, `best` or a step number, with a clear error if absent."""
    if not os.path.isdir(run_dir):
        raise CheckpointError(f"run directory '{run_dir}' does not exist; pass the directory a training run wrote (outputs/<date>/<time>).")
    found = list_checkpoints(run_dir)
    if str(which) == "best":
        path = os.path.join(run_dir, "checkpoints", "best")
        if not os.path.exists(os.path.join(path, "meta.json")):
            raise CheckpointError(f"'{run_dir}' has no best checkpoint yet (one is written at the first evaluation); use checkpoint=latest.")
        return path
    if not found:
        raise CheckpointError(
            f"'{run_dir}' has no complete checkpoint. Checkpoints are written every checkpoint.every "
            f"steps, when a run is stopped by SIGTERM/SIGINT, and at its end; this run wrote none (it failed or was "
            f"killed before its first one), so there is nothing to evaluate or resume: start it again as a new run."
        )
    if str(which) == "latest":
        return found[max(found)]
    try:
        step = int(which)
    except ValueError:
        raise CheckpointError(f"checkpoint must be latest, best or a step number, got '{which}'.") from None
    if step not in found:
        raise CheckpointError(f"'{run_dir}' has no checkpoint at step {step}; it has steps {sorted(found)}.")
    return found[step]


class Checkpointer:
    """Writes and reads checkpoints of one run. `trackables` are TensorFlow objects (the agent's)."""

    def __init__(self, run_dir: str, trackables: dict[str, Any], keep: int = 3, describe: dict | None = None):
        import tensorflow as tf

        self.root = os.path.join(run_dir, "checkpoints")
        self.keep = max(1, int(keep))
        self.describe = describe or {}
        self._ckpt = tf.train.Checkpoint(**trackables)

    # --- writing ------------------------------------------------------------------------
    def save(self, step: int, state: dict[str, Any], buffer_state: dict[str, np.ndarray] | None, best: bool = False) -> str:
        """Write a checkpoint and return its directory. A write that fails removes its partial
        `*.tmp` directory, which would otherwise hold the space of a full disk, and leaves the
        checkpoints written before it as they were; a failure of the machine (a full disk, a
        read-only or failing filesystem) is raised as CheckpointWriteError naming the last whole
        checkpoint and how to resume from it."""
        final = os.path.join(self.root, "best" if best else f"step_{step:010d}")
        tmp = self._writing = f"{final}.tmp"
        try:
            return self._write(final, tmp, step, state, buffer_state, best)
        except BaseException as err:
            shutil.rmtree(tmp, ignore_errors=True)
            fault = _write_fault(err, self._writing)
            if fault is None:
                raise
            run_dir = os.path.dirname(self.root)
            name = os.path.relpath(final, run_dir)
            raise CheckpointWriteError(write_failure(fault, run_dir, last_checkpoint(run_dir), f"the checkpoint {name}",
                                                     removed=f"{name}.tmp")) from err

    def _write(self, final: str, tmp: str, step: int, state: dict[str, Any], buffer_state: dict[str, np.ndarray] | None,
               best: bool) -> str:
        os.makedirs(self.root, exist_ok=True)
        shutil.rmtree(tmp, ignore_errors=True)
        os.makedirs(tmp)
        self._writing = os.path.join(tmp, "agent")  # the file a write fault names when the OS error does not
        self._ckpt.write(self._writing)
        if buffer_state is not None:
            self._writing = os.path.join(tmp, "buffer.npz")
            np.savez(self._writing, **buffer_state)
        self._writing = os.path.join(tmp, "state.json")
        plaindata.write(state, self._writing, os.path.join(tmp, "state.npz"))
        files = {}
        for name in sorted(os.listdir(tmp)):
            path = self._writing = os.path.join(tmp, name)
            with open(path, "rb+") as f:
                os.fsync(f.fileno())
            files[name] = _sha256(path)
        meta = {"step": int(step), "time": time.time(), "files": files, **self.describe, **provenance()}
        self._writing = os.path.join(tmp, "meta.json")
        with open(self._writing, "w") as f:
            json.dump(meta, f, indent=2)
            f.flush()
            os.fsync(f.fileno())
        _fsync_dir(tmp)
        if os.path.exists(final):  # only `best` is ever replaced: move the old one aside first
            old = f"{final}.old"
            shutil.rmtree(old, ignore_errors=True)
            os.rename(final, old)
            try:
                os.rename(tmp, final)
            except OSError:
                os.rename(old, final)  # keep the old one
                raise
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.rename(tmp, final)
        _fsync_dir(self.root)
        if not best:
            self._prune()
        return final

    def _prune(self) -> None:
        """Delete all but the newest `keep` periodic checkpoints. Each is renamed out of the
        checkpoint names first, so a kill mid-delete leaves no half-deleted checkpoint (a step
        directory without meta.json, which nothing would list or prune again); leftovers of an
        earlier killed prune go too."""
        steps = sorted(list_checkpoints(os.path.dirname(self.root)))
        doomed = [f"step_{step:010d}" for step in steps[: -self.keep]]
        for name in os.listdir(self.root):
            complete = os.path.exists(os.path.join(self.root, name, "meta.json"))
            if name.endswith(".pruned") or (STEP_DIR.match(name) and not complete):
                doomed.append(name)
        for name in doomed:
            path = os.path.join(self.root, name)
            if not name.endswith(".pruned"):
                shutil.rmtree(f"{path}.pruned", ignore_errors=True)
                os.replace(path, f"{path}.pruned")
                path = f"{path}.pruned"
            shutil.rmtree(path, ignore_errors=True)

    # --- reading ------------------------------------------------------------------------
    def restore(self, path: str, with_buffer: bool = True, agent_only: bool = False) -> tuple[dict, dict | None]:
        """Verify and load a checkpoint into the trackables; returns (state, buffer_state). The
        state of a checkpoint from before the plain-data format (a pickle) is never loaded: such a
        checkpoint is refused before anything is read, unless only the agent is asked for."""
        meta = verify(path)
        if "state.json" not in meta["files"] and not agent_only:
            raise CheckpointError(
                f"checkpoint {path} was written by a version of this project before 2026-11-25, which saved the "
                f"run's state as a pickle (state.pkl); loading a pickle runs whatever code it names, so this version "
                f"never loads one and cannot resume the run. evaluate.py still evaluates and exports it (it reads "
                f"only the weights); to train on, start a new run, or resume it with the version that wrote it."
            )
        for key, value in self.describe.items():
            if key in meta and described_today(key, meta[key]) != value:
                raise CheckpointError(
                    f"checkpoint {path} was written with {key}={meta[key]!r}, but this run has "
                    f"{key}={value!r}; rebuild the run with the saved config (evaluate.py and resume do this)."
                )
        try:
            status = self._ckpt.read(os.path.join(path, "agent"))
            if agent_only:
                status.assert_existing_objects_matched()
            else:
                status.assert_consumed()
        except (AssertionError, ValueError) as err:
            raise CheckpointError(
                f"checkpoint {path} does not fit this agent (a different agent or network size?): {err}"
            ) from err
        if agent_only:
            return {}, None
        try:
            state = plaindata.read(os.path.join(path, "state.json"), os.path.join(path, "state.npz"))
        except (plaindata.PlainDataError, ValueError, KeyError, TypeError) as err:
            raise CheckpointError(f"checkpoint {path} holds a state this version cannot read: {err}") from err
        buffer_state = None
        if with_buffer and "buffer.npz" in meta["files"]:
            buffer_state = npz_arrays(os.path.join(path, "buffer.npz"))
        return state, buffer_state


def npz_arrays(path: str, map_from_bytes: int = 1 << 20) -> dict[str, np.ndarray]:
    """The arrays of an .npz file. Those of at least `map_from_bytes`, stored uncompressed (as
    `np.savez` stores them), come as read-only memory maps of the file (np.load reads every member
    whole, and an .npz cannot be mapped by np.load): copying one into place then costs no second
    copy in anonymous memory, only file pages that the kernel can drop. The rest are read."""
    out = {}
    with zipfile.ZipFile(path) as archive, open(path, "rb") as raw:
        for info in archive.infolist():
            name = info.filename.removesuffix(".npy")
            found = _stored_npy_data(raw, info) if info.file_size >= map_from_bytes else None
            if found is None:
                with archive.open(info) as member:
                    out[name] = np.lib.format.read_array(member, allow_pickle=False)
            else:
                start, shape, fortran, dtype = found
                out[name] = np.memmap(path, dtype=dtype, mode="r", offset=start, shape=shape,
                                      order="F" if fortran else "C")
    return out


def _stored_npy_data(raw, info: zipfile.ZipInfo):
    """(offset of the array data in the file, shape, fortran order, dtype) of an uncompressed
    .npy member with a plain dtype; None for anything else (read it instead)."""
    if info.compress_type != zipfile.ZIP_STORED:
        return None
    raw.seek(info.header_offset)
    local = raw.read(30)  # the local file header; its name and extra field lengths sit at 26 and 28
    if local[:4] != b"PK\x03\x04":
        return None
    name_len, extra_len = struct.unpack("<HH", local[26:30])
    raw.seek(info.header_offset + 30 + name_len + extra_len)
    version = np.lib.format.read_magic(raw)
    if version == (1, 0):
        shape, fortran, dtype = np.lib.format.read_array_header_1_0(raw)
    elif version == (2, 0):
        shape, fortran, dtype = np.lib.format.read_array_header_2_0(raw)
    else:
        return None
    if dtype.hasobject or not shape or 0 in shape:
        return None
    return raw.tell(), shape, fortran, dtype


def verify(path: str) -> dict:
    """Check a checkpoint is complete and unchanged since it was written; return its meta."""
    meta_path = os.path.join(path, "meta.json")
    try:
        with open(meta_path) as f:
            meta = json.load(f)
    except FileNotFoundError:
        raise CheckpointError(f"checkpoint {path} is incomplete (no meta.json): it was not finished writing; use an earlier one.") from None
    except json.JSONDecodeError:
        raise CheckpointError(f"checkpoint {path} is corrupt (meta.json unreadable); move it aside to use an earlier one.") from None
    for name, digest in meta["files"].items():
        file = os.path.join(path, name)
        if not os.path.exists(file):
            raise CheckpointError(f"checkpoint {path} is incomplete: {name} is missing; move it aside (mv {path} {path}.bad) to use an earlier one.")
        if _sha256(file) != digest:
            raise CheckpointError(
                f"checkpoint {path} is corrupt: {name} does not match the checksum written with it "
                f"(truncated or overwritten?). Move it aside (mv {path} {path}.bad) to resume from an earlier one."
            )
    return meta


def last_checkpoint(run_dir: str) -> str:
    """A sentence on the run's last whole periodic checkpoint (what resume continues from) and how
    to resume from it, or that there is none."""
    found = list_checkpoints(run_dir)
    if not found:
        return "The run has no whole checkpoint yet, so there is nothing to resume: start it again in a new directory."
    step = max(found)
    return (f"Its last whole checkpoint is {os.path.relpath(found[step], run_dir)} (step {step}); "
            f"continue from it with: python train.py {override('resume', run_dir)}")
