"""evaluate.py on a saved run: prints and writes its results, evaluates the latest checkpoint as the
training run did, and refuses a run directory it cannot write before the work."""
import json

import pytest
from helpers import evaluate, read_csv


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
