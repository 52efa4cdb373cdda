"""Faults of a run and of its machine, through the real train.py: an output or resume directory
that cannot be written. Each ends in one `error:` paragraph that names the fix, no traceback, and
exit 2. The read-only disk is a real one: a small tmpfs mounted for the test (root in this
project's sandbox and CI; skipped with the reason where mounting is refused)."""
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SMALL = ["env=pendulum", "network.hidden=[32,32]", "batch_size=64", "eval_episodes=1", "progress=false"]


def train(*args, timeout=600):
    return subprocess.run([sys.executable, "train.py", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout)


def error_paragraph(proc):
    """The one `error:` paragraph on stderr (TensorFlow's own start-up lines aside)."""
    assert "Traceback" not in proc.stderr + proc.stdout, proc.stderr[-3000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, proc.stderr[-3000:]
    return errors[0]


@pytest.fixture
def tmpfs(tmp_path):
    """Mount a tmpfs of the given size (a real filesystem that fills up) under tmp_path."""
    mounted = []

    def mount(size: str, name: str = "disk"):
        path = tmp_path / name
        path.mkdir()
        proc = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here to fill a real disk (needs root): {proc.stderr.strip()}")
        mounted.append(path)
        return path

    yield mount
    for path in mounted:
        subprocess.run(["umount", "-l", str(path)], check=False)


def remount(path, options):
    subprocess.run(["mount", "-o", f"remount,{options}", str(path)], check=True)


# --- bad output directories ----------------------------------------------------------------------
@pytest.mark.parametrize("where", ["/proc/forbidden", "file"])
def test_an_output_directory_that_cannot_be_written_is_refused(tmp_path, where):
    run_dir = "/proc/forbidden" if where == "/proc/forbidden" else str(tmp_path / "a_file" / "run")
    (tmp_path / "a_file").write_text("not a directory")
    proc = train(f"hydra.run.dir={run_dir}", *SMALL)
    assert proc.returncode == 2
    msg = error_paragraph(proc)
    assert msg.startswith(f"error: cannot write the run's output directory hydra.run.dir={run_dir}: ")
    assert ("it cannot be created in /proc" if where == "/proc/forbidden" else "a_file is a file, not a directory") in msg
    assert "leave hydra.run.dir out for the default outputs/<date>/<time>" in msg


def test_a_sweep_directory_that_cannot_be_written_is_refused():
    proc = train("-m", "hydra.sweep.dir=/proc/forbidden_sweep", "seed=0,1", *SMALL)
    assert proc.returncode == 2
    assert "cannot write the run's output directory hydra.sweep.dir=/proc/forbidden_sweep" in error_paragraph(proc)


def test_a_read_only_disk_is_refused_and_resume_of_a_run_on_it_too(tmpfs):
    disk = tmpfs("16m")
    run_dir = disk / "run"
    proc = train(f"hydra.run.dir={run_dir}", *SMALL, "total_steps=300", "learning_starts=200", "eval_every=300")
    assert proc.returncode == 0, proc.stderr[-3000:]
    remount(disk, "ro")

    proc = train(f"resume={run_dir}", "total_steps=400")
    assert proc.returncode == 2
    msg = error_paragraph(proc)
    assert f"cannot write in the run directory {run_dir}: a file cannot be written in it (Read-only file system)" in msg
    assert f"cp -r {run_dir} NEW_DIR" in msg and "python train.py resume=NEW_DIR" in msg

    proc = train(f"hydra.run.dir={disk}/new_run", *SMALL)
    assert proc.returncode == 2
    assert "it cannot be created in" in error_paragraph(proc) and "(Read-only file system)" in proc.stderr
