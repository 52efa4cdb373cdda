"""What a run writes as it goes: CSV records (appended; a new column widens the file by replacing
it whole) and the pruning of old checkpoints."""
import csv
import os

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
