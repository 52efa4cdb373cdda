"""Does dm_control, fitted to MuJoCo 4.0 by envs/dmc.py, still run the suite's tasks as on the MuJoCo
it was built for (3.17)? Each task is rolled out for 300 control steps of seeded random actions and
its observations, rewards and a final 84x84 render are saved; two such files are then compared.

    python -m venv /tmp/dmc3 && /tmp/dmc3/bin/pip install dm-control==1.0.50 mujoco==3.17.0 gymnasium
    /tmp/dmc3/bin/python benchmarks/dmc_mujoco_check.py run /tmp/mujoco3.npz
    uv run python benchmarks/dmc_mujoco_check.py run /tmp/mujoco4.npz
    uv run python benchmarks/dmc_mujoco_check.py compare /tmp/mujoco4.npz /tmp/mujoco3.npz

The fitting (dropping the index entries of arrays the installed MuJoCo lacks) does nothing under
3.17. Run from the repository root (it imports envs/dmc.py).
"""
from __future__ import annotations

import os
import sys

import numpy as np

STEPS = 300


def run(path: str) -> None:
    os.environ.setdefault("MUJOCO_GL", "egl")
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    import mujoco

    from envs.dmc import suite

    out = {}
    for domain, task in suite().ALL_TASKS:
        try:
            env = suite().load(domain, task, task_kwargs={"random": 0})
            spec, rng = env.action_spec(), np.random.default_rng(0)
            env.reset()
            obs, rewards = [], []
            for _ in range(STEPS):
                ts = env.step(rng.uniform(spec.minimum, spec.maximum, spec.shape))
                obs.append(np.concatenate([np.ravel(v) for v in ts.observation.values()]))
                rewards.append(ts.reward or 0.0)
            name = f"{domain}-{task}"
            out[f"{name}/obs"], out[f"{name}/reward"] = np.array(obs), np.array(rewards)
            out[f"{name}/pixels"] = env.physics.render(84, 84, camera_id=0)
        except Exception as err:  # lqr_6_2 diverges under random actions on either MuJoCo
            print(f"{domain}-{task}: {type(err).__name__}: {err}")
    np.savez(path, **out)
    print(f"MuJoCo {mujoco.__version__}: {len(out) // 3} tasks -> {path}")


def compare(path_a: str, path_b: str) -> None:
    a, b = np.load(path_a), np.load(path_b)
    names = sorted({k.split("/")[0] for k in a.files} & {k.split("/")[0] for k in b.files})
    print("| task | obs, step 1 | obs, step 100 | obs, step 300 | reward, max | pixels differing (of 21168) |")
    print("|---|---|---|---|---|---|")
    for name in names:
        d = np.abs(a[f"{name}/obs"] - b[f"{name}/obs"]).max(axis=1)
        reward = np.abs(a[f"{name}/reward"] - b[f"{name}/reward"]).max()
        pixels = int((a[f"{name}/pixels"] != b[f"{name}/pixels"]).sum())
        print(f"| {name} | {d[0]:.1e} | {d[99]:.1e} | {d[-1]:.1e} | {reward:.1e} | {pixels} |")


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("run", help="roll out every task, save to PATH").add_argument("path")
    both = commands.add_parser("compare", help="compare two saved rollouts")
    both.add_argument("path_a")
    both.add_argument("path_b")
    args = parser.parse_args()
    run(args.path) if args.command == "run" else compare(args.path_a, args.path_b)
