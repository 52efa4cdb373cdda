"""Evaluate a saved run:

    python evaluate.py run_dir=outputs/2026-11-21/12-00-00 episodes=20 checkpoint=best
    python evaluate.py run_dir=... video=true        # mp4s in <run_dir>/eval/
    python evaluate.py run_dir=... export=true       # TF SavedModel in <run_dir>/export/
    python evaluate.py run_dir=... export=onnx       # and an ONNX model beside it (uv sync --extra onnx)
    python evaluate.py run_dir=... hub=true          # a model folder in the Hugging Face Hub's layout in <run_dir>/hub/
    python evaluate.py run_dir=... out_dir=$HOME/evals/run1   # a run dir you cannot write: results go there

Rebuilds the run from its saved .hydra/config.yaml, restores the checkpoint, runs deterministic
episodes, prints mean/std/min/max and writes them to <out_dir>/eval/<checkpoint>.json (out_dir:
the run directory unless set; a place it cannot write is refused before any work).
"""
from __future__ import annotations

import os
import sys

from training.runtime import prepare_process

prepare_process()  # before TensorFlow or Keras is imported anywhere
os.environ.setdefault("MUJOCO_GL", "egl")  # headless offscreen rendering for video=true

import hydra  # noqa: E402
from omegaconf import DictConfig, OmegaConf  # noqa: E402

from envs.factory import EnvConfigError  # noqa: E402
from training.config import ConfigError  # noqa: E402


# an absolute path: the same conf/ when evaluate.py runs as a script and when its `main` is imported
@hydra.main(version_base="1.3", config_path=os.path.join(os.path.dirname(os.path.abspath(__file__)), "conf"),
            config_name="evaluate")
def main(cfg: DictConfig) -> None:
    from agents.export import ExportError
    from envs.video import VideoError
    from training.checkpoints import CheckpointError
    from training.evaluate_run import evaluate_run

    try:
        if OmegaConf.is_missing(cfg, "run_dir"):
            raise ConfigError("no run given: pass the directory a training run wrote, e.g. "
                              "`python evaluate.py run_dir=outputs/<date>/<time>`.")
        for key in ("episodes", "video_episodes", "seed"):
            if not isinstance(cfg[key], int) or isinstance(cfg[key], bool) or (key != "seed" and cfg[key] < 1):
                raise ConfigError(f"{key} must be {'an' if key == 'seed' else 'a positive'} integer, got {cfg[key]!r}; "
                                  f"set e.g. {key}={0 if key == 'seed' else 10}.")
        for key in ("video", "hub"):
            if not isinstance(cfg[key], bool):
                raise ConfigError(f"{key} must be true or false, got {cfg[key]!r}; set {key}=true or leave it out.")
        export = export_format(cfg.export)
        out_dir = None if cfg.out_dir is None else os.path.abspath(os.path.expanduser(str(cfg.out_dir)))
        r = evaluate_run(os.path.abspath(str(cfg.run_dir)), str(cfg.checkpoint), int(cfg.episodes),
                         int(cfg.seed), bool(cfg.video), int(cfg.video_episodes), export, out_dir,
                         bool(cfg.hub))
    except (ConfigError, EnvConfigError, CheckpointError, VideoError, ExportError) as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
    print(f"{r['env_id']}, checkpoint {r['checkpoint']} (step {r['checkpoint_step']}), {r['episodes']} episodes: "
          f"return mean {r['return_mean']:.2f}  std {r['return_std']:.2f}  min {r['return_min']:.2f}  max {r['return_max']:.2f}")
    if "success_rate" in r:
        print(f"win rate: {100 * r['success_rate']:.1f}% of {r['episodes']} episodes (is_success at the episode's end)")
    for path in r.get("videos", []):
        print(f"video: {path}")
    if "export" in r:
        print(f"SavedModel: {r['export']}")
    if "onnx" in r:
        print(f"ONNX: {r['onnx']} (acts as the SavedModel: largest difference {r['onnx_largest_difference']:.2g})")
    if "hub" in r:
        print(f"model folder: {r['hub']} (upload: hf upload <user>/<repo> {r['hub']} .)")
    print(f"written: {r['json']}")


def export_format(value) -> str | None:
    """`export`: false (none), true or savedmodel (a SavedModel), onnx (the SavedModel and an ONNX model)."""
    from agents.export import FORMATS

    if value is False or value is None:
        return None
    if value is True:
        return "savedmodel"
    if isinstance(value, str) and value.lower() in FORMATS:
        return value.lower()
    raise ConfigError(f"export must be true (a TF SavedModel), false, or one of the formats {', '.join(FORMATS)} "
                      f"(onnx writes the SavedModel and an ONNX model converted from it), got {value!r}; set e.g. "
                      f"export=onnx.")


if __name__ == "__main__":
    main()
