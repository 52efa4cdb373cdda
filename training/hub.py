"""An evaluated run as a model folder in the Hugging Face Hub's layout (evaluate.py hub=true), the
layout Stable-Baselines3's and CleanRL's users share models in:

    README.md            the model card: Hub metadata (model-index with the mean reward) and the
                         evaluation, how to load the policy, the command and versions that trained it
    results.json         the evaluation (evaluate.py's eval/<checkpoint>.json)
    replay.mp4           the first evaluation episode
    policy/              the policy as a TF SavedModel (obs -> action); policy.onnx with export=onnx
    .hydra/              the run's config and command-line overrides
    checkpoints/<name>/  the checkpoint's weights (the agent's part of it: no replay buffer, RNGs or
                         env states, so the folder evaluates and exports but does not resume)

With .hydra/ and checkpoints/, the folder is itself a run directory evaluate.py (and this project's
Python API) loads. Uploading it is `hf upload <user>/<repo> <folder> .` (huggingface_hub's CLI)."""
from __future__ import annotations

import json
import os
import shutil

import yaml

CARD = "README.md"
VIDEO = "replay.mp4"
RESULTS = "results.json"
POLICY = "policy"
TAGS = ("reinforcement-learning", "deep-reinforcement-learning", "tfrl", "tensorflow", "keras")


def card_metadata(algorithm: str, env: str, result: dict) -> dict:
    """The model card's front matter: the Hub's model-index with the evaluation's mean reward, as
    huggingface_hub's `metadata_eval_result` writes it for SB3 and CleanRL models (so the Hub lists
    the score on the env's leaderboard)."""
    return {
        "library_name": "tfrl",
        "tags": [env, *TAGS],
        "model-index": [{
            "name": algorithm,
            "results": [{
                "task": {"type": "reinforcement-learning", "name": "reinforcement-learning"},
                "dataset": {"name": env, "type": env},
                "metrics": [{"type": "mean_reward", "value": f"{result['return_mean']:.2f} +/- {result['return_std']:.2f}",
                             "name": "mean_reward", "verified": False}],
            }],
        }],
    }


def model_card(algorithm: str, env: str, result: dict, overrides: list[str], meta: dict, *, checkpoint_dir: str,
               policy_kind: str, onnx: bool) -> str:
    """README.md: the front matter, then what the model is, its evaluation, how to load it and how it
    was trained. `meta` is the checkpoint's meta.json (its step, commit and versions)."""
    front = yaml.safe_dump(card_metadata(algorithm, env, result), sort_keys=False)
    code = meta.get("code") or {}
    commit = code.get("commit") or "unknown (not trained in a git checkout)"
    dirty = " (with uncommitted changes to tracked files)" if code.get("dirty") else ""
    versions = "\n".join(f"| {name} | {version} |" for name, version in (meta.get("versions") or {}).items())
    rows = [("episodes", result["episodes"]), ("seed of the first reset", result["seed"]),
            ("return mean", f"{result['return_mean']:.2f}"), ("return std", f"{result['return_std']:.2f}"),
            ("return min", f"{result['return_min']:.2f}"), ("return max", f"{result['return_max']:.2f}"),
            ("episode length mean", f"{result['length_mean']:.1f}")]
    if "success_rate" in result:
        rows.append(("success rate", f"{100 * result['success_rate']:.1f}%"))
    table = "\n".join(f"| {k} | {v} |" for k, v in rows)
    which = "best" if checkpoint_dir == "best" else "latest"
    onnx_use = ("\n\nor, without TensorFlow, the ONNX model:\n\n```python\nimport onnxruntime\n\n"
                "session = onnxruntime.InferenceSession(\"policy.onnx\")\n"
                "action = session.run([\"action\"], {\"obs\": obs[None].astype(\"float32\")})[0][0]\n```") if onnx else ""
    return f"""---
{front}---

# {algorithm} on {env}

A {algorithm} agent trained with tfrl (deep RL on TensorFlow 2 / Keras 3) for {meta['step']:,} env
steps, checkpoint `{result['checkpoint']}`.

## Evaluation

{policy_kind}, {result['episodes']} episodes from `python evaluate.py` (the first reset seeded with {result['seed']},
later episodes following the env's random state):

| | |
|---|---|
{table}

## Use the policy

`policy/` is a TensorFlow SavedModel: a batch of observations in, the agent's actions out.

```python
import tensorflow as tf

policy = tf.saved_model.load("policy")
action = policy(obs[None]).numpy()[0]
```{onnx_use}

With tfrl, this folder is a run directory:

```bash
python evaluate.py run_dir=<this folder> checkpoint={which} video=true
```

## Training

```bash
python train.py {' '.join(overrides)}
```

at commit `{commit}`{dirty}; the whole config is `.hydra/config.yaml`.

| package | version |
|---|---|
{versions}
"""


def copy_weights(checkpoint_path: str, meta: dict, destination: str) -> None:
    """The checkpoint's agent files (agent.index, agent.data-*) and its meta.json (`meta`, as
    training.checkpoints.verify read it) listing only them, their checksums as written: what
    evaluate.py restores."""
    files = {name: digest for name, digest in meta["files"].items() if name.startswith("agent.")}
    os.makedirs(destination)
    for name in files:
        shutil.copy2(os.path.join(checkpoint_path, name), os.path.join(destination, name))
    with open(os.path.join(destination, "meta.json"), "w") as f:
        json.dump({**meta, "files": files}, f, indent=2)


def write_model_folder(folder: str, run_dir: str, checkpoint_path: str, result: dict, *, algorithm: str, env: str,
                       overrides: list[str], meta: dict, policy_kind: str) -> str:
    """The model folder at `folder`, replaced whole: written beside it first and swapped in, so an
    earlier folder is never left half overwritten. `result` is the evaluation, with its "export"
    (the SavedModel), "videos" and, when converted, "onnx" paths."""
    staging = folder.rstrip(os.sep) + ".writing"
    shutil.rmtree(staging, ignore_errors=True)
    os.makedirs(os.path.join(staging, ".hydra"))
    for name in ("config.yaml", "overrides.yaml"):  # not hydra.yaml: it holds the machine's paths
        source = os.path.join(run_dir, ".hydra", name)
        if os.path.exists(source):
            shutil.copy2(source, os.path.join(staging, ".hydra", name))
    checkpoint_dir = os.path.basename(checkpoint_path.rstrip(os.sep))
    copy_weights(checkpoint_path, meta, os.path.join(staging, "checkpoints", checkpoint_dir))
    shutil.copytree(result["export"], os.path.join(staging, POLICY))
    if result.get("onnx"):
        shutil.copy2(result["onnx"], os.path.join(staging, f"{POLICY}.onnx"))
    shutil.copy2(result["videos"][0], os.path.join(staging, VIDEO))
    record = {k: v for k, v in result.items() if k not in ("json", "export", "onnx", "videos")}
    with open(os.path.join(staging, RESULTS), "w") as f:
        json.dump({**record, "env": env, "algorithm": algorithm, "step": meta["step"]}, f, indent=2)
    with open(os.path.join(staging, CARD), "w") as f:
        f.write(model_card(algorithm, env, result, overrides, meta, checkpoint_dir=checkpoint_dir,
                           policy_kind=policy_kind, onnx=bool(result.get("onnx"))))
    if os.path.exists(folder):
        shutil.rmtree(folder)
    os.replace(staging, folder)
    return folder
