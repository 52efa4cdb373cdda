"""Make a scratch copy of CleanRL's ppo_atari.py (or, given as a third argument, ppo_continuous_action.py or pqn.py)
that runs in SB3's venv (benchmarks/setup_sb3.sh, with tyro added) and prints its rate, for
benchmarks/compare_ppo.py --cleanrl. The edits only adapt it: its TensorBoard writer becomes a CSV writer
(tensorboard is not in that venv); for Atari the ALE's envs are registered and the two wrappers
gymnasium 1.x renamed are called by their new names; for MuJoCo the observation clip's wrapper is given
the space gymnasium 1.x asks for; and each iteration prints {"iteration": i, "steps_per_second": batch /
seconds} (collect + update). The algorithm is untouched.

    python labs/ppo_atari_speed/patch_cleanrl.py /path/to/cleanrl /tmp/cleanrl_atari
    python labs/ppo_atari_speed/patch_cleanrl.py /path/to/cleanrl /tmp/cleanrl_mujoco ppo_continuous_action.py
    python labs/ppo_atari_speed/patch_cleanrl.py /path/to/cleanrl /tmp/cleanrl_pqn pqn.py
    benchmarks/.venv-sb3/bin/pip install tyro
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys

ALE = '''import ale_py

gym.register_envs(ale_py)
'''

WRITER = '''import csv as _csv
import json as _json


class SummaryWriter:  # scalars to a CSV: tensorboard is not in this venv
    def __init__(self, path):
        os.makedirs(path, exist_ok=True)
        self.f = open(os.path.join(path, "scalars.csv"), "w", newline="")
        self.w = _csv.writer(self.f)

    def add_text(self, *a, **k):
        pass

    def add_scalar(self, tag, value, step):
        self.w.writerow([tag, float(value), int(step)])

    def close(self):
        self.f.close()
'''

TIMING = [
    ("    for iteration in range(1, args.num_iterations + 1):\n",
     "    for iteration in range(1, args.num_iterations + 1):\n        _t0 = time.perf_counter()\n"),
    ('        writer.add_scalar("charts/SPS"',
     '        print(_json.dumps({"iteration": iteration, "steps_per_second": args.batch_size / (time.perf_counter() - _t0)}), '
     'flush=True)\n        writer.add_scalar("charts/SPS"'),
]
EDITS = {
    "ppo_atari.py": [
        ("from torch.utils.tensorboard import SummaryWriter\n", ""),
        ("from cleanrl_utils.atari_wrappers import", ALE + WRITER + "\n\nfrom cleanrl_utils.atari_wrappers import"),
        ("gym.wrappers.GrayScaleObservation(env)", "gym.wrappers.GrayscaleObservation(env)"),
        ("gym.wrappers.FrameStack(env, 4)", "gym.wrappers.FrameStackObservation(env, 4)"),
        *TIMING],
    "ppo_continuous_action.py": [
        ("from torch.utils.tensorboard import SummaryWriter\n", WRITER),
        ("gym.wrappers.TransformObservation(env, lambda obs: np.clip(obs, -10, 10))",
         "gym.wrappers.TransformObservation(env, lambda obs: np.clip(obs, -10, 10), env.observation_space)"),
        *TIMING],
    "pqn.py": [("from torch.utils.tensorboard import SummaryWriter\n", WRITER), *TIMING],
}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("checkout", help="a CleanRL checkout (its cleanrl/ and cleanrl_utils/)")
    p.add_argument("out", help="where the patched copy goes")
    p.add_argument("script", nargs="?", default="ppo_atari.py", choices=sorted(EDITS))
    a = p.parse_args()
    checkout, out, script = a.checkout, a.out, a.script
    with open(os.path.join(checkout, "cleanrl", script)) as f:
        text = f.read()
    for old, new in EDITS[script]:
        if text.count(old) != 1:
            sys.exit(f"error: this CleanRL's {script} does not have {old.strip()!r} once; patch it by hand")
        text = text.replace(old, new)
    os.makedirs(out, exist_ok=True)
    shutil.copytree(os.path.join(checkout, "cleanrl_utils"), os.path.join(out, "cleanrl_utils"), dirs_exist_ok=True)
    with open(os.path.join(out, script), "w") as f:
        f.write(text)
    print(f"wrote {os.path.join(out, script)}")


if __name__ == "__main__":
    main()
