"""What the update checks share (sb3_sac_, sb3_dqn_, author_td7_ and author_mrq_update_check.py): each runs a
reference's update and tfrl's from the same state on the same inputs, in two processes, and
reports per update how far tfrl's outputs and weight changes are from the reference's, beside how
far the reference's own are when the batch's rows are reordered."""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from typing import NamedTuple

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class Queued:
    """Stands in for an agent's tf.random.Generator: hands out the given draws in order, normal
    ones from `noise`, uniform ones from `uniforms`."""

    def __init__(self, noise: list | None = None, uniforms: list | None = None):
        self.noise, self.uniforms = list(noise or []), list(uniforms or [])

    def normal(self, shape):
        return self.noise.pop(0)

    def uniform(self, shape, minval=0.0, maxval=1.0):
        return self.uniforms.pop(0)


def relative(a, b) -> float:
    """|a - b| / |b| over all elements, in float64."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-12))


def prefixed(prefix: str, values: dict) -> dict:
    return {f"{prefix}/{key}": value for key, value in values.items()}


def report(title: str, ours: list[dict[str, float]], floor: list[dict[str, float]], tolerance: float) -> int:
    """Print the table of differences per update (tfrl's | the reordered reference's) and the
    verdict; the exit code: 0 if every one of tfrl's differences is within `tolerance`."""
    print(title)
    width = max(len(key) for key in ours[0]) + 2
    print(" " * width + "".join(f"{'update ' + str(k):>22}" for k in range(len(ours))))
    for key in ours[0]:
        print(f"{key:{width}}" + "".join(f"{a[key]:10.1e} | {b[key]:9.1e}" for a, b in zip(ours, floor)))
    worst = max(max(row.values()) for row in ours)
    same = worst <= tolerance
    print(f"largest difference {worst:.1e}, tolerance {tolerance:g}: {'the same' if same else 'NOT the same'}")
    return 0 if same else 1


def sub(data: dict, prefix: str) -> dict:
    """The entries of `data` under `prefix/`, without it."""
    return {key[len(prefix) + 1:]: value for key, value in data.items() if key.startswith(prefix + "/")}


# --- a PyTorch reference's side: its state by module and parameter names ----------------------------
def torch_state(owner, modules: tuple[str, ...], optimizers: dict[str, str]) -> dict[str, np.ndarray]:
    """`owner`'s modules' parameters ("<module>/<parameter>") and its Adam(W) optimizers' state
    ("adam/<module>/<parameter>/exp_avg" and /exp_avg_sq and /step), `optimizers` naming the
    optimizer attribute of each trained module."""
    state = {}
    for module in modules:
        for name, p in getattr(owner, module).named_parameters():
            state[f"{module}/{name}"] = p.detach().numpy().copy()
    for module, attribute in optimizers.items():
        optimizer = getattr(owner, attribute)
        for name, p in getattr(owner, module).named_parameters():
            slots = optimizer.state[p]
            state[f"adam/{module}/{name}/step"] = np.float32(slots["step"])
            for moment in ("exp_avg", "exp_avg_sq"):
                state[f"adam/{module}/{name}/{moment}"] = slots[moment].numpy().copy()
    return state


def torch_save(owner, attributes: tuple[str, ...]):
    import copy

    return copy.deepcopy([getattr(owner, a).state_dict() for a in attributes])


def torch_restore(owner, attributes: tuple[str, ...], saved) -> None:
    import copy

    for a, state in zip(attributes, copy.deepcopy(saved), strict=True):
        getattr(owner, a).load_state_dict(state)


# --- tfrl's side: its Keras variables under the reference's names ---------------------------------
class Layout(NamedTuple):
    """How a PyTorch parameter's array maps onto its Keras variable's, and back."""

    to_keras: Callable[[np.ndarray], np.ndarray]
    to_torch: Callable[[np.ndarray], np.ndarray]


AS_IS = Layout(lambda x: x, lambda x: x)
DENSE = Layout(np.transpose, np.transpose)  # Keras' kernels are (in, out), PyTorch's weights (out, in)
CONV = Layout(lambda w: w.transpose(2, 3, 1, 0), lambda k: k.transpose(3, 2, 0, 1))  # (kh, kw, in, out) | (out, in, kh, kw)


def after_flatten(height: int, width: int, channels: int) -> Layout:
    """A Dense layer on flattened feature maps: Keras flattens (H, W, C), PyTorch (C, H, W)."""
    def to_keras(w):
        return w.reshape(-1, channels, height, width).transpose(2, 3, 1, 0).reshape(height * width * channels, -1)

    def to_torch(k):
        return k.reshape(height, width, channels, -1).transpose(3, 2, 0, 1).reshape(-1, channels * height * width)
    return Layout(to_keras, to_torch)


def layer_pairs(model, names: dict[str, str]) -> list[tuple]:
    """(variable, the reference's parameter name, Layout) for each Dense and Conv2D layer of a Keras
    model, `names` mapping the layer's name after the model's ("l1") to the reference's module
    ("zs_mlp.l1"). A model's layers are in the order they compute, so a Dense layer right after a
    Flatten reads the feature maps that Flatten took."""
    import keras

    out, flattened = [], None
    for layer in model.layers:
        if isinstance(layer, keras.layers.Flatten):
            flattened = after_flatten(*layer.input.shape[1:])
            continue
        if isinstance(layer, (keras.layers.Dense, keras.layers.Conv2D)):
            module = names[layer.name[len(model.name) + 1:]]
            kernel = CONV if isinstance(layer, keras.layers.Conv2D) else flattened or DENSE
            out += [(layer.kernel, f"{module}.weight", kernel), (layer.bias, f"{module}.bias", AS_IS)]
        flattened = None
    return out


def set_state(state: dict, targets: list[tuple]) -> None:
    """Set tfrl's variables, and with an optimizer its Adam moments and step, from the reference's
    `state` (`torch_state`'s names); `targets` are (layer pairs, the reference's module, optimizer or None)."""
    for pairs, module, optimizer in targets:
        for var, name, layout in pairs:
            var.assign(layout.to_keras(state[f"{module}/{name}"]))
            if optimizer is not None:
                i = optimizer._get_variable_index(var)
                for moment, slot in (("exp_avg", optimizer._momentums[i]), ("exp_avg_sq", optimizer._velocities[i])):
                    slot.assign(layout.to_keras(state[f"adam/{module}/{name}/{moment}"]))
                optimizer.iterations.assign(int(state[f"adam/{module}/{name}/step"]))


def keras_weights(targets: list[tuple]) -> dict[str, np.ndarray]:
    """tfrl's variables under the reference's names and in its layout."""
    return {f"{module}/{name}": layout.to_torch(var.numpy()) for pairs, module, _ in targets for var, name, layout in pairs}


def changes(after: dict, reference: dict, before: dict, modules: list[str]) -> dict[str, float]:
    """Per module, how far `after`'s change from `before` is from `reference`'s (relative)."""
    row = {}
    for module in modules:
        keys = sorted(key for key in reference if key.startswith(module + "/"))
        row[f"{module} change"] = relative(np.concatenate([(after[k] - before[k]).ravel() for k in keys]),
                                           np.concatenate([(reference[k] - before[k]).ravel() for k in keys]))
    return row


# --- the two processes ------------------------------------------------------------------------------
REFERENCE_PYTHON = os.path.join(ROOT, "benchmarks", ".venv-sb3", "bin", "python")  # setup_sb3.sh's venv
SB3_MISSING = f"SB3's venv is missing ({REFERENCE_PYTHON}): run `bash benchmarks/setup_sb3.sh` once, then this again."


def author_arguments(parser, batches_help: str) -> None:
    """The arguments both author checks take: the env, how many updates, the seed, the tolerance,
    where to keep the author's side's output, and the hidden flag that runs that side."""
    parser.add_argument("--env", default="Hopper-v5", help="a gymnasium env with vector observations and continuous actions "
                        "(the MR.Q check also takes an Atari game, ALE/<Game>-v5)")
    parser.add_argument("--batches", type=int, default=3, help=batches_help)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tolerance", type=float, default=1e-3, help="the largest relative difference that passes")
    parser.add_argument("--author-data", metavar="NPZ",
                        help="keep the author's side's output here, or read it from here if it exists (tfrl's side again)")
    parser.add_argument("--author-side", nargs=1, metavar="OUT", help=argparse.SUPPRESS)


def reference_data(script: str, path: str | None, ready: bool, missing: str, arguments: list[str],
                flag: str = "--author-side") -> dict:
    """The reference's side's output: read from `path` where it exists, else written there (or to a
    temporary file) by `script <flag>` in SB3's venv; exits with `missing` if the reference's code
    is not `ready` or SB3's venv is missing."""
    with tempfile.TemporaryDirectory() as tmp:
        out = path or os.path.join(tmp, "author.npz")
        if not os.path.exists(out):
            if not (ready and os.path.exists(REFERENCE_PYTHON)):
                sys.exit(missing)
            subprocess.run([REFERENCE_PYTHON, os.path.abspath(script), flag, out, *arguments], check=True)
        return dict(np.load(out))
