"""``python tests/recipes/batch_independent.py SCRIPT ARGS...``, under any launcher, runs
SCRIPT as that launcher would, with two changes that make what it computes for an image
independent of the other images in its batch: every ``nn.BatchNorm2d`` is a
``nn.GroupNorm`` with one group (each image normalised by its own statistics, where
SyncBatchNorm, which needs GPUs, would use those of the whole step's batch), and
``torch.autocast`` is off (float32: on GPUs a batch of 16 and one of 32 round float16
products differently; the CPU computes in float32 anyway). Two ranks of 16 images and one process of 32 must then end alike but for
the order of the sums.
"""

import runpy
import sys
from pathlib import Path

import torch
from torch import nn


def per_image_norm(channels):
    return nn.GroupNorm(1, channels)


class float32(torch.autocast):
    def __init__(self, device_type, dtype=None, enabled=True, cache_enabled=None):
        super().__init__(device_type, dtype=dtype, enabled=False)


if __name__ == "__main__":
    nn.BatchNorm2d = per_image_norm
    torch.autocast = float32
    sys.argv = sys.argv[1:]
    sys.path[0] = str(Path(sys.argv[0]).parent)
    runpy.run_path(sys.argv[0], run_name="__main__")
