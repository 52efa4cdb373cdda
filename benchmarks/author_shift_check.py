"""Check that tfrl's random shift (`agents.augment.random_shift`, `network.random_shift`) moves images
as the author's MR.Q code does (facebookresearch/MRQ, `MRQ.shift_aug`, DrQ-v2's augmentation):
the same images, the same offsets, the same shifted images.

    bash benchmarks/setup_sb3.sh && bash benchmarks/setup_author.sh mrq      # once
    uv run python benchmarks/author_shift_check.py

The author's side (SB3's venv, this file with `--author-side`) draws images of 0-255 values in
PyTorch's (N, C, H, W), shifts them with `shift_aug` (pad 4: replicate-padding, then a bilinear
`grid_sample` at whole-pixel offsets) under a fixed seed, and draws the same offsets again from
that seed (`shift_aug`'s one random call). tfrl's side shifts the same images, as (N, H, W, C), by
those offsets with `random_shift`: the author's offset is (x, y), tfrl's (row, column). It reports
the largest difference in pixel values per case and exits 1 above `--tolerance`. The author's grid
is built from the height alone, so the images are square, as Atari's and DMC's 84x84.
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks.update_check import reference_data  # noqa: E402

REF = os.path.join(ROOT, "benchmarks", ".mrq-ref")
CASES = {"atari": (4, 84), "dmc": (9, 84), "small": (3, 16)}  # channels (stacked frames), side
PAD = 4  # the author's


def author_side(out: str, n: int, seed: int) -> None:
    import torch

    sys.path.insert(0, REF)
    from MRQ import shift_aug

    rng, data = np.random.default_rng(seed), {}
    for case, (channels, side) in CASES.items():
        images = rng.integers(0, 256, (n, channels, side, side)).astype(np.float32)
        torch.manual_seed(seed)
        shifted = shift_aug(torch.as_tensor(images), pad=PAD).numpy()
        torch.manual_seed(seed)
        offsets = torch.randint(0, 2 * PAD + 1, size=(n, 1, 1, 2), dtype=torch.float).numpy().reshape(n, 2)
        data |= {f"{case}_images": images, f"{case}_shifted": shifted, f"{case}_offsets": offsets}
    np.savez(out, **data)


def tfrl_side(data: dict) -> dict[str, float]:
    import tensorflow as tf

    from agents.augment import random_shift

    largest = {}
    for case in CASES:
        images = tf.constant(data[f"{case}_images"].transpose(0, 2, 3, 1))
        x, y = data[f"{case}_offsets"].astype(np.int32).T
        ours = random_shift(images, tf.constant(np.stack([y, x], 1)), PAD).numpy()
        largest[case] = float(np.abs(ours - data[f"{case}_shifted"].transpose(0, 2, 3, 1)).max())
    return largest


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--images", type=int, default=64, help="images per case")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tolerance", type=float, default=0.01, help="the largest difference in pixel values (0-255) that passes")
    parser.add_argument("--author-side", nargs=1, metavar="OUT", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.author_side:
        author_side(args.author_side[0], args.images, args.seed)
        return
    data = reference_data(__file__, None, os.path.isfile(os.path.join(REF, "MRQ.py")),
                          "the author's MR.Q is not set up: run `bash benchmarks/setup_sb3.sh` and "
                          "`bash benchmarks/setup_author.sh mrq` once, then this again.",
                          ["--images", str(args.images), "--seed", str(args.seed)])
    largest = tfrl_side(data)
    print("largest |tfrl - the author's| over the shifted images, in pixel values (0-255)")
    for case, (channels, side) in CASES.items():
        print(f"  {case:6s} {args.images} images of {side}x{side}x{channels}: {largest[case]:.2e}")
    worst = max(largest.values())
    print(f"largest {worst:.2e}, tolerance {args.tolerance}: {'the same' if worst <= args.tolerance else 'DIFFERENT'}")
    sys.exit(int(worst > args.tolerance))


if __name__ == "__main__":
    main()
