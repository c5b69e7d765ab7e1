"""A two-input model: an image and a vector of side information, fused before the head."""

import torch
from torch import nn


class Fusion(nn.Module):
    def __init__(self, features: int, classes: int) -> None:
        super().__init__()
        self.image = nn.Sequential(
            nn.Conv2d(3, 16, 3, stride=2, padding=1),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
        )
        self.side = nn.Linear(features, 16)
        self.head = nn.Linear(32, classes)

    def forward(self, image: torch.Tensor, side: torch.Tensor) -> torch.Tensor:
        return self.head(torch.cat([self.image(image), self.side(side)], dim=1))


def build(features: int = 8, classes: int = 3) -> nn.Module:
    return Fusion(features, classes)
