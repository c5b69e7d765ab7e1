"""The DLAS zoo: small CNNs trained on real labelled digits, cached, built on the device.

A sweep names a zoo model as a python source (``source = "ngb.core.models.dlas_zoo:digits_net"``,
``kwargs = { arch = "resnet" }``, one input ``[batch, 1, 8, 8]``); ``digits_net`` trains it with
the seeded recipe (``ngb.core.models.dlas_training.Recipe``) on ``digits-train`` the first time and
loads the cached weights after that, so every worker of every trial on a device runs the same
trained model. Training takes seconds on two cores (30 epochs, quiet: VGG-style 5 s, ResNet-style
12 s, MobileNet-style about 25 s), which is why it can happen where the model runs, as ngb
compiles where it runs; each pruning ladder takes a minute or two more.

The model carries a ``ZooTag`` (``ZOO_ATTR``): ``ngb.core.trial.optimise`` sees it and makes pruning
a fine-tuned step of the DLAS ladder (``ngb.core.models.dlas_ladder``) instead of a one-shot cut,
calibrates ``int8-cal`` on real training samples, and reports each step's accuracy on
``digits-test`` beside its facts.

The cache (``cache_root``): ``$NGB_DLAS_CACHE`` where set (the tests use it), else
``$XDG_CACHE_HOME/ngb/dlas`` (``~/.cache/ngb/dlas``), one folder per recipe key and
architecture. Entries are torch state dicts (``torch.load(weights_only=True)``: a cache file
never runs code) and JSON, written to a temporary name and renamed, so a killed trial leaves no
half entry; an entry that does not load is trained again.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from ngb.core.base.errors import ConfigError
from ngb.core.models import labelled_data
from ngb.core.models.dlas_nets import ARCHS, build
from ngb.core.models.dlas_training import Recipe, fit
from torch import nn

#: the attribute a zoo model carries (``ZooTag``)
ZOO_ATTR = "ngb_dlas"
CACHE_ENV = "NGB_DLAS_CACHE"
#: the labelled sets the zoo trains on and measures on (``ngb.core.models.labelled_data``)
TRAIN_SET = "digits-train"
TEST_SET = "digits-test"


@dataclass(frozen=True)
class ZooTag:
    """Which zoo model this is and the recipe that trained it."""

    arch: str
    recipe: Recipe

    def folder(self) -> Path:
        return cache_root() / self.recipe.key / self.arch


def cache_root() -> Path:
    own = os.environ.get(CACHE_ENV)
    if own:
        return Path(own).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "ngb" / "dlas"


def tag_of(model: object) -> ZooTag | None:
    tag = getattr(model, ZOO_ATTR, None)
    return tag if isinstance(tag, ZooTag) else None


def recipe_from(overrides: dict[str, Any]) -> Recipe:
    """A recipe with the given fields changed (``epochs = 5`` for a quick look); unknown names
    and values that are not positive numbers of the field's type are one line."""
    fields = asdict(Recipe())
    for name, value in overrides.items():
        if name not in fields:
            raise ConfigError(
                f"dlas zoo: unknown recipe setting {name!r}; known: {', '.join(fields)}"
            )
        kind = type(fields[name])
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(f"dlas zoo: {name} must be a number, got {value!r}")
        if not math.isfinite(value):
            raise ConfigError(f"dlas zoo: {name} must be finite, got {value!r}")
        if kind is int and value != int(value):
            raise ConfigError(f"dlas zoo: {name} must be a whole number, got {value!r}")
        if not (value > 0 or (name in ("seed", "finetune_epochs", "weight_decay") and value == 0)):
            raise ConfigError(f"dlas zoo: {name} must be > 0, got {value!r}")
        fields[name] = kind(value)
    return Recipe(**fields)


def digits_net(arch: str = "resnet", **recipe: Any) -> nn.Module:
    """The factory a sweep names: ``arch`` trained on ``digits-train`` (cached), in eval mode,
    tagged for ``ngb.core.trial.optimise``. ``recipe`` overrides ``Recipe``'s fields."""
    if arch not in ARCHS:
        raise ConfigError(f"dlas zoo: unknown arch {arch!r}; known: {', '.join(ARCHS)}")
    tag = ZooTag(arch, recipe_from(recipe))
    model = baseline(tag)
    setattr(model, ZOO_ATTR, tag)
    return model


def baseline(tag: ZooTag) -> nn.Module:
    """The trained, uncompressed model (from the cache where it is there)."""
    with seeded(tag.recipe.seed):
        model = build(tag.arch)
    path = tag.folder() / "baseline.pt"
    if load_state(model, path):
        return model.eval()
    train = labelled_data.load(TRAIN_SET)
    with seeded(tag.recipe.seed):
        fit(model, train.inputs, train.labels, tag.recipe.epochs, tag.recipe.learning_rate,
            tag.recipe)  # fmt: skip
    save_state(model.state_dict(), path)
    return model.eval()


@contextmanager
def seeded(seed: int) -> Iterator[None]:
    """Initialisation and training from ``seed`` on the CPU, the caller's RNG left as it was."""
    with torch.random.fork_rng(devices=[]), torch.device("cpu"):
        torch.manual_seed(seed)
        yield


def load_state(model: nn.Module, path: Path) -> bool:
    """Load a cached state dict into ``model``; False where there is none or it does not fit."""
    if not path.is_file():
        return False
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
        model.load_state_dict(state)
    except Exception:  # noqa: BLE001 - a damaged or foreign entry is trained again
        return False
    return True


def save_state(state: dict[str, Any], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=path.parent, suffix=".part", delete=False) as handle:
        torch.save(state, handle)
    os.replace(handle.name, path)


def save_json(data: object, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(
        "w", dir=path.parent, suffix=".part", delete=False, encoding="utf-8"
    ) as handle:
        json.dump(data, handle)
    os.replace(handle.name, path)


def load_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None
    except (OSError, ValueError):
        return None


def held_out() -> labelled_data.LabelledSet:
    return labelled_data.load(TEST_SET)


def calibration_inputs(samples: int = 256, seed: int = 0) -> np.ndarray:
    """Real training samples for int8 calibration (never the test set), a seeded choice."""
    train = labelled_data.load(TRAIN_SET)
    pick = np.random.default_rng(seed).permutation(train.samples)[:samples]
    return train.inputs[np.sort(pick)]


# One factory per architecture, for the command line, which passes no kwargs:
# ``ngb measure ngb.core.models.dlas_zoo:digits_vgg -i x:batch,1,8,8 --accuracy digits-test``.
def digits_resnet(**recipe: Any) -> nn.Module:
    return digits_net("resnet", **recipe)


def digits_mobilenet(**recipe: Any) -> nn.Module:
    return digits_net("mobilenet", **recipe)


def digits_vgg(**recipe: Any) -> nn.Module:
    return digits_net("vgg", **recipe)
