"""One writer per run directory: a live holder refuses a second, a dead one's hold is stale."""
import os
import signal
import subprocess
import sys

import pytest

from training.runlock import RunDirBusy, RunDirLock

HOLD = "import sys, time; from training.runlock import RunDirLock\nwith RunDirLock(sys.argv[1]):\n    print('held', flush=True); time.sleep(600)"


def test_a_live_holder_refuses_a_second_writer_and_a_killed_one_does_not(tmp_path):
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(tmp_path)], cwd=root, stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": root})
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(RunDirBusy, match=rf"being written by another live process \(pid {holder.pid} on .*-c"):
            with RunDirLock(str(tmp_path)):
                pass
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    assert (tmp_path / "run.lock").exists()  # the killed holder's record stays; its lock went with it
    with RunDirLock(str(tmp_path)):
        with RunDirLock(str(tmp_path)):  # re-entrant in its own process (train.py, then run_training)
            pass
        assert f'"pid": {os.getpid()}' in (tmp_path / "run.lock").read_text()
    assert not (tmp_path / "run.lock").exists()  # a holder that ends leaves the directory as it found it
