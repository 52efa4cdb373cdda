"""One writer per run directory.

A run holds an exclusive `flock` on `<run_dir>/run.lock` while it trains; a second process that
would train into or resume the same directory (two resumes of one run, a requeued job racing its
predecessor) is refused with a message naming the holder, instead of interleaving its checkpoints
with the first one's. The kernel releases the lock when its process dies however it dies, so a
hold left by a killed run never blocks a resume (its file stays, naming it, until the next run
takes the lock); a run that ends removes the file. On NFS, Linux maps `flock` onto the server's byte-range locks.
"""
from __future__ import annotations

import fcntl
import json
import os
import shlex
import socket
import sys
import time

from training.config import ConfigError

LOCK_FILE = "run.lock"


class RunDirBusy(ConfigError):
    """Another live process is writing this run directory."""


_HELD: dict[str, int] = {}  # lock file -> how many holds of this process: train.py takes it, then run_training


class RunDirLock:
    """Held by this process for as long as the `with` block runs; re-entrant within the process."""

    def __init__(self, run_dir: str):
        self.path = os.path.realpath(os.path.join(run_dir, LOCK_FILE))
        self._fd: int | None = None

    def __enter__(self) -> "RunDirLock":
        if self.path in _HELD:
            _HELD[self.path] += 1
            return self
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                break
            if _same_file(fd, self.path):
                self._fd = fd
                break
            os.close(fd)  # a holder removed the file as we opened it: lock the one at the path now
        if self._fd is None:
            holder = _describe(os.read(fd, 4096))
            os.close(fd)
            run_dir = os.path.dirname(self.path)
            raise RunDirBusy(
                f"the run directory {run_dir} is being written by another live process ({holder}); two writers "
                f"would interleave their checkpoints. Wait for that run to finish, or stop it (a SIGTERM writes "
                f"a checkpoint first) and resume once it has exited; to branch off a copy instead: "
                f"cp -r {shlex.quote(run_dir)} NEW_DIR && python train.py resume=NEW_DIR"
            ) from None
        record = {"pid": os.getpid(), "host": socket.gethostname(), "since": time.strftime("%Y-%m-%d %H:%M:%S"),
                  "command": " ".join(sys.argv)}
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(record).encode(), 0)
        _HELD[self.path] = 1
        return self

    def __exit__(self, *exc) -> None:
        _HELD[self.path] -= 1
        if _HELD[self.path] == 0:
            del _HELD[self.path]
            try:
                os.unlink(self.path)  # while still held, so that nobody locks a file that is going away
            except OSError:
                pass  # a directory that became read-only: the file stays, its lock goes with the close
            os.close(self._fd)  # releases the lock
            self._fd = None


def _same_file(fd: int, path: str) -> bool:
    try:
        return os.path.samestat(os.fstat(fd), os.stat(path))
    except FileNotFoundError:
        return False


def _describe(raw: bytes) -> str:
    try:
        h = json.loads(raw.decode())
        return f"pid {int(h['pid'])} on {h['host']}, since {h['since']}: {h['command']}"
    except (ValueError, KeyError, TypeError, UnicodeDecodeError):
        return "a process that left no record of itself"
