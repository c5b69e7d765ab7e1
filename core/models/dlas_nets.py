"""The DLAS paper's architectures in miniature, sized for 8x8 grey digits (10 classes).

DLAS times ResNet, MobileNet and VGG models it trained on CIFAR-10 and ImageNet. No data set can
be downloaded here, so the zoo (``ngb.core.models.dlas_zoo``) trains the same three designs, small,
on scikit-learn's digits: what matters for the paper's questions is each design's kind of layer --
residual adds, depthwise-separable convolutions, plain stacks ending in wide fully connected layers
-- since that is what pruning, quantisation and each compiler treat differently.

- ``resnet``: a 3x3 stem, three basic blocks (32, 64 and 128 channels, the last two with stride 2
  and a 1x1 projection on the shortcut), global average pooling, one linear classifier.
- ``mobilenet``: a 3x3 stem and four depthwise-separable blocks (depthwise 3x3, pointwise 1x1,
  BatchNorm and ReLU6 after each), 128 to 512 channels (253K weights). At half that width
  (67K weights) its weight-pruning curve already fell at 90 % (97.8 -> 92.6 % top-1, 6 epochs
  of fine-tuning; 95.0 % with 10), where the paper's CIFAR MobileNet, over-parameterised for
  its data as all three of its models are, holds; at this width it holds to 90 % (98.7 %) and
  falls at 95 %.
- ``vgg``: two pairs of 3x3 convolutions with max pooling, then two linear layers (256 -> 128 ->
  10): most of its weights are in the classifier, as in VGG.

Each one traces with torch.fx (int8 quantisation), exports to ONNX and ``torch.export``, and
names its classifier (``get_classifier``), which channel pruning leaves whole so the output stays
10 classes wide. torch is imported by the caller's process: this module is only imported to
build a model.
"""

from __future__ import annotations

import torch
from torch import nn

#: the input every zoo model takes, without the batch dimension
SAMPLE_SHAPE = (1, 8, 8)
CLASSES = 10


class _Classified(nn.Module):
    """A body and a linear head; ``get_classifier`` as timm names it
    (``ngb.core.trial.optimise``)."""

    head: nn.Module

    def get_classifier(self) -> nn.Module:
        return self.head


class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.relu1 = nn.ReLU()
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.relu2 = nn.ReLU()
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(
                nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.bn2(self.conv2(self.relu1(self.bn1(self.conv1(x)))))
        return self.relu2(out + self.shortcut(x))


class DigitsResNet(_Classified):
    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(1, 32, 3, 1, 1, bias=False), nn.BatchNorm2d(32), nn.ReLU()
        )
        self.blocks = nn.Sequential(
            BasicBlock(32, 32, 1), BasicBlock(32, 64, 2), BasicBlock(64, 128, 2)
        )
        self.pool = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.head = nn.Linear(128, CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.pool(self.blocks(self.stem(x))))


def _separable(cin: int, cout: int, stride: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(cin, cin, 3, stride, 1, groups=cin, bias=False),
        nn.BatchNorm2d(cin),
        nn.ReLU6(),
        nn.Conv2d(cin, cout, 1, bias=False),
        nn.BatchNorm2d(cout),
        nn.ReLU6(),
    )


class DigitsMobileNet(_Classified):
    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(1, 64, 3, 1, 1, bias=False), nn.BatchNorm2d(64), nn.ReLU6()
        )
        self.blocks = nn.Sequential(
            _separable(64, 128, 1), _separable(128, 256, 2), _separable(256, 256, 1),
            _separable(256, 512, 2),
        )  # fmt: skip
        self.pool = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.head = nn.Linear(512, CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.pool(self.blocks(self.stem(x))))


def _conv(cin: int, cout: int) -> list[nn.Module]:
    return [nn.Conv2d(cin, cout, 3, 1, 1), nn.BatchNorm2d(cout), nn.ReLU()]


class DigitsVGG(_Classified):
    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(
            *_conv(1, 32), *_conv(32, 32), nn.MaxPool2d(2),
            *_conv(32, 64), *_conv(64, 64), nn.MaxPool2d(2), nn.Flatten(),
        )  # fmt: skip
        self.fc = nn.Sequential(nn.Linear(64 * 2 * 2, 128), nn.ReLU())
        self.head = nn.Linear(128, CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.fc(self.features(x)))


ARCHS: dict[str, type[_Classified]] = {
    "resnet": DigitsResNet,
    "mobilenet": DigitsMobileNet,
    "vgg": DigitsVGG,
}


def build(arch: str) -> nn.Module:
    """A freshly initialised ``arch`` (from the current torch RNG); the caller seeds it."""
    return ARCHS[arch]()
