"""The DeepMind Control suite (Tassa et al. 2018) as a gymnasium env, through dm_control's own tasks.

dm_control is the suite's reference code: its tasks, their rewards and their initial-state
distributions are used as they are, so scores compare with the literature's. This module only
adapts the interface:
- observations are the task's observation dict flattened in its order (float32), or with
  `pixels` an RGB render (H, W, 3) uint8 from camera 0 (camera 2 for the quadruped, as DrQ-v2 and
  MR.Q render it); `env.frame_stack` stacks renders as it stacks Atari frames;
- each action is repeated `action_repeat` times and their rewards summed. The default is 2 with
  pixels (DrQ-v2, MR.Q) and 1 from states;
- episodes end when the suite's time limit (1000 control steps) is reached: `truncated`, since the
  task goes on. A task that ends itself (discount 0) is `terminated`.

Each env runs dm_control in a Python process of its own (`python -m envs.dmc`, joined by a socket
pair), without TensorFlow: dm_control loads OpenGL (EGL, and Mesa's LLVM on a machine without a
GPU) when it is imported, and that library and TensorFlow's LLVM in one process abort it at exit.
The process is started by subprocess, not multiprocessing, so it works from any launcher's workers
(joblib's loky processes cannot spawn multiprocessing children) and never re-imports the caller's
script. One round trip per step costs far less than an agent's step.

dm_control 1.0.50 was built for MuJoCo 3.17. It indexes every MjModel and MjData array by name,
and MuJoCo 4.0 removed nine flex-vertex arrays, which no suite task has. `_fit_dm_control_to_mujoco`
drops from dm_control's table only the arrays this MuJoCo lacks, so both versions work.
labs/log.md ("DeepMind Control") shows the check: every suite task's trajectory under
MuJoCo 4.0 matches 3.17's to rounding. Dropping arrays is sound only while dm_control's enums agree
with MuJoCo's, and the same function checks that they do.
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import weakref
from multiprocessing.connection import Connection
from typing import Any

import gymnasium as gym
import numpy as np

from envs.opengl import INSTALL, OpenGLUnavailable, opengl_failure
from envs.state import is_plain, mjdata_state, set_mjdata_state

CAMERAS = {"quadruped": 2}  # the camera the pixel literature renders each domain from (default 0)


def _fit_dm_control_to_mujoco() -> None:
    import mujoco
    from dm_control.mujoco.wrapper.mjbindings import enums, sizes

    for struct, cls in (("mjmodel", mujoco.MjModel), ("mjdata", mujoco.MjData)):
        for name in [n for n in sizes.array_sizes[struct] if not hasattr(cls, n)]:
            del sizes.array_sizes[struct][name]
    # dropping arrays is sound while the enums agree: a renumbered one would make dm_control look up
    # the wrong objects, silently. The counts (mjN...) grow when MuJoCo adds a member at the end.
    changed = [f"{kind}.{member}" for kind in dir(enums) if kind.startswith("mjt") and hasattr(mujoco, kind)
               for member, value in getattr(enums, kind)._asdict().items()
               if not member.startswith("mjN") and int(getattr(getattr(mujoco, kind), member, value)) != int(value)]
    if changed:
        raise RuntimeError(
            f"this dm_control was built for a MuJoCo whose enums differ from the installed MuJoCo {mujoco.__version__}'s "
            f"({', '.join(changed[:4])}), so its tasks would read the wrong objects. Install a dm-control release "
            f"for this MuJoCo, or the MuJoCo it was built for (uv add 'mujoco<{mujoco.__version__.split('.')[0]}')."
        )
    mujoco.set_mju_user_warning(_mujoco_warning)


def _mujoco_warning(text: str) -> None:
    # replaces dm_control's handler, which logged one deprecation for every env built: its models set
    # `settotalmass`, which MuJoCo 4 deprecates while still applying it (the trajectories match
    # 3.17's: benchmarks/dmc_mujoco_check.py). Any other warning goes to the run's log.
    if "settotalmass" not in text:
        print(f"MuJoCo warning: {text}", file=sys.stderr, flush=True)


def suite():
    """dm_control's suite, fitted to the installed MuJoCo (in the env's own process)."""
    from dm_control import suite as dmc_suite

    _fit_dm_control_to_mujoco()
    return dmc_suite


def check_task(domain: str, task: str) -> tuple[str, str]:
    tasks = suite().ALL_TASKS
    domains = sorted({d for d, _ in tasks})
    if domain not in domains:
        raise ValueError(f"the DeepMind Control suite has no domain {domain!r}; its domains are {', '.join(domains)} "
                         f"(env.domain=cheetah env.task=run)")
    if (domain, task) not in tasks:
        names = sorted(t for d, t in tasks if d == domain)
        raise ValueError(f"the DeepMind Control domain {domain!r} has no task {task!r}; its tasks are "
                         f"{', '.join(names)} (env.task={names[0]})")
    return domain, task


def _model_arrays(model) -> dict[str, np.ndarray]:
    return {k: getattr(model, k) for k in dir(model) if not k.startswith("_") and isinstance(getattr(model, k), np.ndarray)}


class _Task:
    """One dm_control task with the gymnasium env's interface, in the env's process."""

    def __init__(self, domain: str, task: str, pixels: bool, action_repeat: int, image_size: int, render_size: int):
        import copy

        check_task(domain, task)
        self.env = suite().load(domain, task, task_kwargs={"random": 0}, visualize_reward=False)
        self.pixels, self.action_repeat, self.image_size, self.render_size = pixels, action_repeat, image_size, render_size
        self.camera = CAMERAS.get(domain, 0)
        # the model as compiled: a task that moves a target at reset changes the model, and a
        # checkpoint keeps only the arrays that differ from this copy's
        self.compiled = copy.copy(self.env.physics.model.ptr)

    def spec(self) -> dict[str, Any]:
        action = self.env.action_spec()
        size = sum(int(np.prod(v.shape)) for v in self.env.observation_spec().values())
        return {"low": action.minimum.astype(np.float32), "high": action.maximum.astype(np.float32),
                "obs_size": size, "fps": round(1.0 / (self.env.control_timestep() * self.action_repeat))}

    def obs(self, time_step) -> np.ndarray:
        if self.pixels:
            return self.env.physics.render(self.image_size, self.image_size, camera_id=self.camera)
        return np.concatenate([np.ravel(v) for v in time_step.observation.values()]).astype(np.float32)

    def reset(self, seed: int | None):
        if seed is not None:
            self.env.task.random.seed(seed % 2**32)  # a RandomState takes 32-bit seeds
        return self.obs(self.env.reset())

    def step(self, action: np.ndarray):
        reward = 0.0
        for _ in range(self.action_repeat):
            time_step = self.env.step(action)
            reward += time_step.reward or 0.0
            if time_step.last():
                break
        ended = time_step.last()
        terminated = bool(ended and time_step.discount == 0.0)
        return self.obs(time_step), float(reward), terminated, bool(ended and not terminated)

    def render(self) -> np.ndarray:
        return self.env.physics.render(self.render_size, self.render_size, camera_id=self.camera)

    def upload_terrain(self) -> None:
        """Height fields into the renderer, where one has been made, as dm_control's tasks do at reset."""
        import mujoco

        physics = self.env.physics
        if physics.model.nhfield and physics._contexts is not None:
            with physics.contexts.gl.make_current() as ctx:
                for i in range(physics.model.nhfield):
                    ctx.call(mujoco.mjr_uploadHField, physics.model.ptr, physics.contexts.mujoco.ptr, i)

    def saved_state(self) -> dict[str, Any]:
        compiled = _model_arrays(self.compiled)
        model = {k: v.copy() for k, v in _model_arrays(self.env.physics.model.ptr).items()
                 if not np.array_equal(v, compiled[k])}
        task = {k: v for k, v in vars(self.env.task).items() if k != "_random" and is_plain(v)}
        return {"data": mjdata_state(self.env.physics.data.ptr), "model": model,
                "random": self.env.task.random.get_state(legacy=False), "task": task,
                "step_count": int(self.env._step_count), "reset_next_step": bool(self.env._reset_next_step)}

    def restore_state(self, state: dict[str, Any]) -> None:
        import mujoco

        model, data = self.env.physics.model.ptr, self.env.physics.data.ptr
        current = _model_arrays(model)
        for name, compiled in _model_arrays(self.compiled).items():  # this env may have moved its targets since
            current[name][...] = state["model"].get(name, compiled)
        self.upload_terrain()  # the renderer's copy of a height field the task moved (the quadruped's escape)
        set_mjdata_state(data, state["data"])
        # dm_control steps as mj_step2 then mj_step1, so each step starts from the position and
        # velocity stage of the last one; the arrays sized by that stage's contacts could not be
        # written into this data, and mj_step1 recomputes them from the restored state
        mujoco.mj_step1(model, data)
        self.env.task.random.set_state(state["random"])
        for k, v in state["task"].items():
            setattr(self.env.task, k, v)
        self.env._step_count = state["step_count"]
        self.env._reset_next_step = state["reset_next_step"]


def _serve(conn) -> None:
    """The env's process: build the task from the first message, then answer the env's calls
    until it closes (or goes: the socket's end)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the training process stops at a checkpoint and closes us
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        kwargs = conn.recv()
    except EOFError:
        return
    # dm_control loads its OpenGL backend on import; an env that never renders needs none, and so
    # runs on a machine without EGL or OSMesa
    if kwargs.pop("render"):
        os.environ.setdefault("MUJOCO_GL", "egl")  # headless rendering
    else:
        os.environ["MUJOCO_GL"] = "disable"
    try:
        task = _Task(**kwargs)
        conn.send(("ok", task.spec()))
    except Exception as err:  # a bad domain or task (a ValueError), a missing package, no OpenGL
        failure = opengl_failure(err)
        conn.send(("error", ("OpenGLUnavailable", failure) if failure else (type(err).__name__, str(err))))
        return
    while True:
        try:
            method, args = conn.recv()
        except EOFError:
            return
        if method == "close":
            return
        try:
            conn.send(("ok", getattr(task, method)(*args)))
        except Exception as err:  # e.g. dm_control's PhysicsError when a simulation diverges
            conn.send(("error", (type(err).__name__, str(err))))


def _stop(process: subprocess.Popen, conn: Connection) -> None:
    try:
        conn.send(("close", ()))
    except (BrokenPipeError, OSError):
        pass
    try:
        process.wait(timeout=5)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
    conn.close()


def _start(kwargs: dict[str, Any]) -> tuple[subprocess.Popen, Connection]:
    """`python -m envs.dmc <fd>` on one end of a socket pair, its task's arguments sent first."""
    ours, theirs = socket.socketpair()
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    path = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)
    # run from the project's root: `-m` puts the working directory first on the path, and another
    # directory could hold a package named envs
    process = subprocess.Popen([sys.executable, "-m", "envs.dmc", str(theirs.fileno())], pass_fds=(theirs.fileno(),),
                               env={**os.environ, "PYTHONPATH": path}, stdin=subprocess.DEVNULL, cwd=root)
    theirs.close()
    conn = Connection(ours.detach())
    conn.send(kwargs)
    return process, conn


class DMCEnv(gym.Env):
    metadata = {"render_modes": ["rgb_array"], "render_fps": 50}

    def __init__(self, domain: str = "cheetah", task: str = "run", pixels: bool = False,
                 action_repeat: int | None = None, image_size: int = 84, render_size: int = 256,
                 render_mode: str | None = None):
        if action_repeat is None:
            action_repeat = 2 if pixels else 1
        if isinstance(action_repeat, bool) or not isinstance(action_repeat, int) or action_repeat < 1:
            raise ValueError(f"env.action_repeat must be an integer >= 1 (or null: 2 with pixels, 1 from states), "
                             f"got {action_repeat!r}")
        if isinstance(image_size, bool) or not isinstance(image_size, int) or image_size < 1:
            raise ValueError(f"env.image_size must be a positive integer (84 in the literature), got {image_size!r}")
        self.domain, self.task, self.pixels, self.action_repeat = domain, task, bool(pixels), action_repeat
        self.render_mode = render_mode
        self._process, self._conn = _start(dict(domain=domain, task=task, pixels=self.pixels, action_repeat=action_repeat,
                                                image_size=image_size, render_size=int(render_size),
                                                render=self.pixels or render_mode is not None))
        self._closer = weakref.finalize(self, _stop, self._process, self._conn)
        spec = self._receive()  # the process sends its spec, or its error, unasked
        self.metadata = {**self.metadata, "render_fps": spec["fps"]}
        self.action_space = gym.spaces.Box(spec["low"], spec["high"], spec["low"].shape, np.float32)
        self.observation_space = (gym.spaces.Box(0, 255, (image_size, image_size, 3), np.uint8) if self.pixels else
                                  gym.spaces.Box(-np.inf, np.inf, (spec["obs_size"],), np.float32))

    def _receive(self):
        try:
            status, value = self._conn.recv()
        except (EOFError, OSError) as err:
            raise RuntimeError(f"the DeepMind Control process died (exit code {self._process.poll()}); check that "
                               f"dm-control is installed (uv sync) and, for pixels or video, MUJOCO_GL. {INSTALL}") from err
        if status == "error":
            kind, message = value
            if kind == "ValueError":  # a bad setting: its message names it
                raise ValueError(message)
            if kind == "OpenGLUnavailable":
                raise OpenGLUnavailable(message)
            if kind in ("ImportError", "ModuleNotFoundError"):
                raise gym.error.DependencyNotInstalled(f"{message} (uv sync installs dm-control and its dependencies)")
            raise RuntimeError(f"the DeepMind Control process raised {kind}: {message}")
        return value

    def _call(self, method: str, *args):
        if not self._closer.alive:
            raise RuntimeError(f"this DMC env ({self.domain}-{self.task}) is closed")
        try:
            self._conn.send((method, args))
            return self._receive()
        except BaseException:  # interrupted between the call and its answer: the next answer would be this one's
            self.close()
            raise

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        return self._call("reset", None if seed is None else int(seed)), {}

    def step(self, action):
        obs, reward, terminated, truncated = self._call("step", np.asarray(action, np.float64))
        return obs, reward, terminated, truncated, {}

    def render(self) -> np.ndarray | None:
        return self._call("render") if self.render_mode == "rgb_array" else None

    def close(self) -> None:
        self._closer()

    # --- the state a checkpoint keeps (envs.state) -------------------------------------------
    def saved_state(self) -> dict[str, Any]:
        """The simulator's data, the model arrays the task changed, the task's random state and
        plain attributes, and the episode's step count."""
        return self._call("saved_state")

    def restore_state(self, state: dict[str, Any]) -> None:
        self._call("restore_state", state)


if __name__ == "__main__":  # an env's process (`_start`)
    _serve(Connection(int(sys.argv[1])))
