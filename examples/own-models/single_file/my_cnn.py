"""A model in a single file, named in a sweep as `single_file/my_cnn.py:build`.

The file's folder travels with it to the devices: keep only the code the model needs here.
"""

from torch import nn


def build(width: int = 16, classes: int = 10) -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, width, 3, padding=1),
        nn.BatchNorm2d(width),
        nn.ReLU(),
        nn.Conv2d(width, width * 2, 3, stride=2, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(width * 2, classes),
    )
