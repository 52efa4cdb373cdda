"""Record episodes to mp4 with MuJoCo's headless offscreen renderer.

Rendering runs in a child process that never imports TensorFlow: MuJoCo's EGL/OSMesa backends
crash in a process that has TensorFlow loaded (both carry LLVM). The child steps and renders the
env and sends each observation over a pipe; the parent answers with the policy's action.
"""
from __future__ import annotations

import multiprocessing as mp
import os
from typing import Any, Callable

import numpy as np

from envs.opengl import INSTALL, opengl_failure


class VideoError(RuntimeError):
    """The video could not be rendered; the message names the likely fix."""


def camera_follower(env) -> Callable[[], None] | None:
    """For a locomotion task (a MuJoCo env that rewards moving forward: Ant, HalfCheetah, Hopper,
    Walker2d, Humanoid, Swimmer), a function that turns the render camera to the body the task
    rewards, to call before each frame; None for other envs. gymnasium's v5 cameras for Ant and
    HalfCheetah stay where the episode began, so the robot leaves the frame within a few hundred
    steps. The camera keeps its distance, angles and height and moves over the ground with the
    body: every frame, and every episode, is framed the same. The floor goes along too
    (`floor_follower`): it is drawn 40 m around the origin, and a trained Ant runs 90 m in an
    episode."""
    base = env.unwrapped
    renderer = getattr(base, "mujoco_renderer", None)
    if renderer is None or not hasattr(base, "_forward_reward_weight"):
        return None
    body = getattr(base, "_main_body", 1)  # Ant-v5 names its rewarded body; the others reward body 1's motion
    move_floor = floor_follower(base.model, base.data)

    def follow() -> None:
        camera = renderer._get_viewer(env.render_mode).cam  # gymnasium's renderer keeps one viewer per mode
        camera.lookat[:2] = base.data.body(body).xpos[:2]
        move_floor(camera.lookat[:2])

    return follow


def floor_follower(model, data) -> Callable[[np.ndarray], None]:
    """A function that moves the drawn floor under a point, by whole periods of its texture, so the
    checks stay where they are on the ground and the robot is seen to move over them. The floor is
    an infinite plane to the physics, so moving it along itself changes no contact: only the part
    MuJoCo draws (its `size`) moves. A no-op where there is no textured plane named floor."""
    import mujoco

    try:
        geom = model.geom("floor")
    except KeyError:
        return lambda point: None
    mat = int(model.geom_matid[geom.id])
    if int(model.geom_type[geom.id]) != mujoco.mjtGeom.mjGEOM_PLANE or mat < 0:
        return lambda point: None
    repeat = model.mat_texrepeat[mat].astype(np.float64)
    uniform = bool(model.mat_texuniform[mat])
    period = 1.0 / repeat if uniform else 2.0 * model.geom_size[geom.id][:2] / repeat  # metres per texture repeat
    origin = model.geom_pos[geom.id][:2].copy()

    def move(point: np.ndarray) -> None:
        model.geom_pos[geom.id][:2] = origin + np.round((point - origin) / period) * period
        data.geom_xpos[geom.id][:2] = model.geom_pos[geom.id][:2]  # this frame's (a world geom: the same)

    return move


def _render_worker(conn, env_id: str, max_episode_steps, kwargs: dict, seed: int, episodes: int, prefix: str,
                   frame_stack: int = 1) -> None:
    os.environ.setdefault("MUJOCO_GL", "egl")
    import imageio.v2 as imageio

    from envs.factory import make_env

    try:
        env = make_env(env_id, seed=seed, max_episode_steps=max_episode_steps, kwargs=kwargs, render_mode="rgb_array",
                       frame_stack=frame_stack)
        fps = int(env.metadata.get("render_fps", 30))
        follow = camera_follower(env) or (lambda: None)

        def frame() -> np.ndarray:
            follow()
            return np.asarray(env.render())

        paths, returns = [], []
        obs, _ = env.reset(seed=seed)
        for i in range(episodes):
            path = f"{prefix}{i}.mp4"
            total, done = 0.0, False
            with imageio.get_writer(path, fps=fps, codec="libx264", macro_block_size=1) as writer:
                writer.append_data(frame())
                while not done:
                    conn.send(obs)
                    obs, reward, terminated, truncated, _ = env.step(conn.recv())
                    writer.append_data(frame())
                    total += float(reward)
                    done = terminated or truncated
            paths.append(path)
            returns.append(total)
            obs, _ = env.reset()
        env.close()
        conn.send({"paths": paths, "returns": returns})
    except Exception as err:  # report to the parent instead of dying silently
        conn.send({"error": opengl_failure(err) or f"{type(err).__name__}: {err}"})


def record_videos(policy: Callable[[np.ndarray], np.ndarray], env_id: str, seed: int, episodes: int, prefix: str,
                  max_episode_steps: int | None = None, kwargs: dict[str, Any] | None = None,
                  frame_stack: int = 1) -> dict:
    """Run `episodes` episodes of `policy` (one observation in, one action out) and write
    `<prefix><i>.mp4` for each. Returns {"paths": [...], "returns": [...]}."""
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=_render_worker, args=(child, env_id, max_episode_steps, dict(kwargs or {}), seed, episodes,
                                                     prefix, frame_stack))
    proc.start()
    try:
        while True:
            msg = parent.recv()
            if isinstance(msg, dict):
                break
            parent.send(policy(msg))
    except EOFError:
        msg = {"error": f"the render process died (exit code {proc.exitcode}); check MUJOCO_GL. {INSTALL}"}
    finally:
        proc.join(timeout=60)
    if "error" in msg:
        error = str(msg["error"])
        if "pygame" in error:  # gymnasium's hint says pip; classic control renders with pygame
            error = "pygame is not installed (classic-control envs render with it): `uv pip install pygame`"
        raise VideoError(f"could not record a video of {env_id}: {error}")
    return msg
