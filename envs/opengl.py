"""A headless OpenGL backend that cannot be loaded, told as what to install.

MuJoCo and dm_control render without a display through EGL or OSMesa, chosen by MUJOCO_GL and
loaded when `mujoco` or dm_control's suite is first imported. A missing system library surfaces as
whatever PyOpenGL or MuJoCo raise deep inside that import (an AttributeError on a library that
loaded as None, an ImportError, a RuntimeError for a misspelt MUJOCO_GL), so the failure is
recognised by the code it was raised in, not by its type.
"""
from __future__ import annotations

import os
import traceback

# the packages that load a backend: PyOpenGL, MuJoCo's backends and its GL context, dm_control's
_BACKEND_CODE = ("/OpenGL/", "/mujoco/egl/", "/mujoco/osmesa/", "/mujoco/glfw/", "/mujoco/rendering/classic/gl_context",
                 "/dm_control/_render/")

INSTALL = ("Rendering without a display needs EGL (Debian/Ubuntu: `apt-get install libegl1 libgl1-mesa-dri`, then "
           "MUJOCO_GL=egl, the default here) or OSMesa (`apt-get install libosmesa6`, then MUJOCO_GL=osmesa); a run "
           "that renders nothing (no pixels, no video) needs neither with MUJOCO_GL=disable.")


class OpenGLUnavailable(RuntimeError):
    """Raised where the failure crossed a process (dm_control's env process): the message is
    `opengl_failure`'s."""


def raised_loading_opengl(err: BaseException) -> bool:
    frames = traceback.extract_tb(err.__traceback__)
    return any(marker in frame.filename.replace(os.sep, "/") for frame in frames for marker in _BACKEND_CODE)


def opengl_failure(err: BaseException) -> str | None:
    """What to install, with the error itself, if `err` (or an error it was raised from) was raised
    loading an OpenGL backend; else None."""
    while err is not None:
        if isinstance(err, OpenGLUnavailable):
            return str(err)
        if raised_loading_opengl(err):
            backend = os.environ.get("MUJOCO_GL") or "unset"
            return (f"MuJoCo's OpenGL backend (MUJOCO_GL={backend}) could not be loaded: {type(err).__name__}: "
                    f"{str(err).rstrip('.')}. {INSTALL}")
        err = err.__cause__
    return None
