"""Training and fine-tuning for the DLAS zoo: one seeded recipe, stated in full.

``Recipe`` is everything that decides a trained model: epochs, learning rate, batch, weight decay,
the fine-tuning epochs after each compression step, and the seed. Training is Adam with a
one-cycle learning rate over the ``digits-train`` part (``ngb.core.models.labelled_data``), batches
drawn from a seeded generator; no augmentation (the digits are centred 8x8 images). The recipe's
``key`` names its cache entries (``ngb.core.models.dlas_zoo``), so a changed recipe never reuses
another's weights.

Fine-tuning after pruning keeps the zeros where they are: ``masks`` (one boolean tensor per
pruned weight) are applied after every optimiser step, as DLAS fine-tunes its pruned models.

Threads: training uses torch's intra-op threads as set in the process; floating-point sums then
differ in the last bits between machines with other thread counts, so two devices may train
weights that differ slightly. Each device measures its own model's accuracy (the trial records
it), which is what the issue asks: accuracy belongs to the model on the device that runs it.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass

import numpy as np
import torch
from torch import nn


@dataclass(frozen=True)
class Recipe:
    epochs: int = 30
    learning_rate: float = 3e-3
    batch: int = 64
    weight_decay: float = 1e-4
    finetune_epochs: int = 6
    finetune_learning_rate: float = 1e-3
    seed: int = 0

    @property
    def key(self) -> str:
        """A short hash of the recipe (and of this module's format: bump ``_FORMAT``)."""
        text = json.dumps({"format": _FORMAT, **asdict(self)}, sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:16]


#: bump when training changes in a way the recipe's fields do not show
_FORMAT = 2  # 2: the MobileNet-style model twice as wide


def fit(
    model: nn.Module,
    inputs: np.ndarray,
    labels: np.ndarray,
    epochs: int,
    learning_rate: float,
    recipe: Recipe,
    masks: dict[str, torch.Tensor] | None = None,
) -> nn.Module:
    """Train ``model`` in place (and return it in eval mode); ``masks`` keep pruned zeros."""
    x = torch.from_numpy(np.ascontiguousarray(inputs, dtype=np.float32))
    y = torch.from_numpy(np.ascontiguousarray(labels, dtype=np.int64))
    steps_per_epoch = (len(y) + recipe.batch - 1) // recipe.batch
    optimiser = torch.optim.Adam(
        model.parameters(), lr=learning_rate, weight_decay=recipe.weight_decay
    )
    schedule = torch.optim.lr_scheduler.OneCycleLR(
        optimiser, learning_rate, total_steps=max(1, epochs * steps_per_epoch)
    )
    generator = torch.Generator().manual_seed(recipe.seed)
    params = dict(model.named_parameters())
    model.train()
    for _ in range(epochs):
        order = torch.randperm(len(y), generator=generator)
        for begin in range(0, len(y), recipe.batch):
            batch = order[begin : begin + recipe.batch]
            loss = nn.functional.cross_entropy(model(x[batch]), y[batch])
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
            schedule.step()
            if masks:
                with torch.no_grad():
                    for name, mask in masks.items():
                        params[name].mul_(mask)
    return model.eval()


def predictions(model: nn.Module, inputs: np.ndarray, batch: int = 256) -> np.ndarray:
    """Top-1 class per sample, in eager, in the model's own number format."""
    first = next(iter(model.parameters()), None)
    dtype = first.dtype if first is not None and first.is_floating_point() else torch.float32
    out: list[np.ndarray] = []
    with torch.inference_mode():
        for begin in range(0, len(inputs), batch):
            chunk = torch.from_numpy(np.ascontiguousarray(inputs[begin : begin + batch]))
            scores = model(chunk.to(dtype))
            out.append(scores.float().argmax(dim=1).numpy())
    return np.concatenate(out)
