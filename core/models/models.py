"""Models under test: the paper's timm families (Table IV), any other timm model, and block stacks.

- ``PAPER_FAMILIES`` lists Table IV exactly; with timm 1.0.31 these names reproduce the paper's
  parameter counts to the digit (the plain ``deit_*`` / ``swin_*`` names do not).
- Blocks (``model="conv"|"mha"``, Table V) live in ``ngb.core.models.blocks``; that module's
  docstring records the open choices (heads = width // 64, conv feature map 56x56, sequence length
  10).
- ``create_model(spec)`` builds a model in eval mode on ``spec.device`` with weights and example
  input drawn from fixed seeds, so every compiler in a sweep (and every re-run) sees the same
  numbers and outputs can be compared against eager torch.
- ``model_info`` counts parameters exactly and MACs with PyTorch's own
  ``torch.utils.flop_counter.FlopCounterMode`` at batch 1 (MACs = FLOPs / 2). That counter covers
  the matrix work -- convolutions, linear/matmul/bmm, scaled-dot-product attention -- and ignores
  elementwise ops, normalisation, activations and pooling, which is the usual convention for
  "MACs" tables such as the paper's. Models are built on torch's ``meta`` device for counting, so
  no weights are allocated and the 15 paper models count in seconds.
- ``paper_table(cache_dir=...)`` computes Tables IV and V once and caches them as JSON keyed by the
  torch and timm versions (the CLI passes its cache folder; core does not know where that is).

torch and timm are imported inside functions only.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ngb.core.base import safe_files
from ngb.core.base.errors import ConfigError, NgbError, first_line
from ngb.core.models import model_build
from ngb.core.models.blocks import (
    BLOCK_KINDS,
    PAPER_BLOCK_WIDTHS,
    block_input_shape,
    build_block_stack,
    check_block,
)
from ngb.core.models.model_basics import EXAMPLE_SEED, WEIGHT_SEED, count_macs, resolve_model
from ngb.core.models.model_build import count_params
from ngb.core.models.model_sources import ModelSource, source_of
from ngb.core.records.types import TrialSpec

if TYPE_CHECKING:
    import torch
    from ngb.core.models.model_types import Array, Example, Model
    from torch import nn

# The paper's Table IV: three sizes per family, smallest first.
PAPER_FAMILIES: dict[str, tuple[str, ...]] = {
    "resnet": ("resnet18", "resnet50", "resnet101"),
    "efficientnet": ("efficientnet_b3", "efficientnet_b4", "efficientnet_b5"),
    "deit": (
        "deit3_small_patch16_224",
        "deit3_medium_patch16_224",
        "deit3_base_patch16_224",
    ),
    "swin": ("swin_s3_tiny_224", "swin_s3_small_224", "swin_s3_base_224"),
    "convnext": ("convnext_tiny", "convnext_small", "convnext_base"),
}
PAPER_MODELS: tuple[str, ...] = tuple(m for ms in PAPER_FAMILIES.values() for m in ms)
BLOCK_FAMILY = "block"

MACS_COUNTER = (
    "torch.utils.flop_counter.FlopCounterMode, MACs = FLOPs/2 at batch 1 "
    "(conv, linear/matmul, attention; elementwise ops not counted)"
)
# Bump when the cached table's meaning changes (new columns, different counting).
_TABLE_FORMAT = 1
_CACHE_NAME = "paper_models.json"


@dataclass(frozen=True)
class ModelInfo:
    """Size of one model (or one block stack) at batch 1; ``input_shape`` includes the batch."""

    name: str
    family: str | None
    params: int
    macs: int
    input_shape: tuple[int, ...]
    width: int | None = None  # blocks only
    depth: int = 1  # blocks only
    source: str | None = None  # a user's model: "onnx model.onnx", "python enc.py:build"...
    inputs: str = ""  # a user's model: its inputs, described for listings

    @property
    def gmacs(self) -> float:
        return self.macs / 1e9

    @property
    def label(self) -> str:
        if self.width is None:
            return self.name
        return f"{self.name}{self.width}x{self.depth}"

    def to_dict(self) -> dict[str, object]:
        return {**asdict(self), "input_shape": list(self.input_shape)}

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> ModelInfo:
        # Any: a row read back from the JSON cache file; a malformed one is caught by _read_cache
        values: dict[str, Any] = dict(data)
        return cls(**{**values, "input_shape": tuple(values["input_shape"])})


@dataclass(frozen=True)
class PaperTable:
    """Tables IV (models) and V (one block of each paper width)."""

    models: tuple[ModelInfo, ...]
    blocks: tuple[ModelInfo, ...]
    from_cache: bool = False


def family_of(name: str) -> str | None:
    """The paper family of ``name`` (``"block"`` for conv/mha); None for other timm models."""
    if name in BLOCK_KINDS:
        return BLOCK_FAMILY
    arch = name.split(".", 1)[0]  # drop a timm pretrained tag such as ".a1_in1k"
    for family, members in PAPER_FAMILIES.items():
        if arch in members:
            return family
    return None


def _timm_input_size(name: str, override: int | None) -> tuple[tuple[int, int, int], bool]:
    """(C, H, W) for a timm model, and whether the model must be built for that size."""
    from timm.models import get_pretrained_cfg

    cfg = get_pretrained_cfg(name)
    channels, height, width = cfg.input_size if cfg is not None else (3, 224, 224)
    fixed = bool(cfg is not None and cfg.fixed_input_size)
    if override is None:
        return (channels, height, width), False
    return (channels, override, override), fixed and (override, override) != (height, width)


def _build_timm(name: str, input_size: int | None) -> tuple[nn.Module, tuple[int, int, int]]:
    import timm

    chw, needs_img_size = _timm_input_size(name, input_size)
    try:
        if needs_img_size:
            model = timm.create_model(name, pretrained=False, img_size=input_size)
        else:
            model = timm.create_model(name, pretrained=False)
    except (TypeError, ValueError, AssertionError, RuntimeError) as exc:
        detail = first_line(exc)
        what = f"img_size={input_size}" if needs_img_size else "default settings"
        raise ConfigError(f"cannot build timm model {name!r} with {what}: {detail}") from None
    return model, chw


def _build(
    name: str, width: int | None, depth: int, input_size: int | None
) -> tuple[nn.Module, tuple[int, ...]]:
    """The module (random weights from the current RNG) and its batch-1 input shape."""
    if name in BLOCK_KINDS:
        check_block(name, width, depth)
        assert width is not None
        return build_block_stack(name, width, depth), block_input_shape(name, width, 1, input_size)
    model, chw = _build_timm(resolve_model(name), input_size)
    return model, (1, *chw)


def _torch_device(device: str) -> torch.device:
    import torch

    try:
        dev = torch.device(device)
    except RuntimeError as exc:
        raise ConfigError(f"bad torch device {device!r}: {exc}") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise NgbError(f"device {device!r} requested but torch sees no CUDA GPU here")
    return dev


def create_model(spec: TrialSpec, cache_dir: Path | str | None = None) -> tuple[Model, Example]:
    """Build ``spec``'s model in eval mode on ``spec.device`` and a deterministic example batch.

    Weights come from ``WEIGHT_SEED`` (the global RNG is restored afterwards) and the example from a
    private ``torch.Generator`` seeded with ``EXAMPLE_SEED``: identical on every call and machine.
    Shapes: timm ``(batch, 3, H, W)`` (H, W from the model's pretrained config unless
    ``spec.input_size``); conv blocks ``(batch, width, S, S)``; MHA blocks ``(batch, 10, width)``.
    A user's model (``spec.source``) is built by ``ngb.core.models.model_build`` from its files,
    found in ``cache_dir``'s artifacts on a device; its example is a ``NamedInputs`` tuple.
    """
    import torch

    device = _torch_device(spec.device)
    source = source_of(spec)
    if source is not None:
        cache = Path(cache_dir) if cache_dir is not None else None
        return model_build.create(spec.model, source, spec.batch, device, cache)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(WEIGHT_SEED)
        model, shape = _build(spec.model, spec.width, spec.depth, spec.input_size)
    model = model.eval().to(device)
    generator = torch.Generator().manual_seed(EXAMPLE_SEED)
    example = torch.randn((spec.batch, *shape[1:]), generator=generator, dtype=torch.float32)
    return model, example.to(device)


def reference_output(model: Model, example: Example, name: str = "model") -> Array:
    """The eager output (numpy) every compiler's output is compared with; several inputs are
    passed positionally; an ONNX model's reference comes from ONNX Runtime (unoptimised)."""
    return model_build.reference_output(model, example, name)


def model_info(
    name: str, width: int | None = None, depth: int = 1, input_size: int | None = None
) -> ModelInfo:
    """Parameters and MACs at batch 1 of a timm model or a block stack (built on ``meta``)."""
    import torch

    def measure(device: str) -> tuple[int, int, tuple[int, ...]]:
        with torch.device(device):
            model, shape = _build(name, width, depth, input_size)
            model.eval()
            example = torch.zeros(shape)
            return count_params(model), count_macs(model, example), shape

    try:
        params, macs, shape = measure("meta")
    except NgbError:
        raise
    except Exception:  # noqa: BLE001 - an op without a meta kernel: count on real CPU tensors
        with torch.random.fork_rng(devices=[]):
            params, macs, shape = measure("cpu")
    is_block = name in BLOCK_KINDS
    return ModelInfo(
        name=name,
        family=family_of(name),
        params=params,
        macs=macs,
        input_shape=tuple(shape),
        width=width if is_block else None,
        depth=depth if is_block else 1,
    )


def model_info_for(spec: TrialSpec, cache_dir: Path | str | None = None) -> ModelInfo:
    """``model_info`` for the model a trial runs (batch-1 figures, whatever ``spec.batch`` is);
    a timm model's or a block stack's is kept in ``cache_dir`` (``kept_model_info``)."""
    source = source_of(spec)
    if source is None:
        if cache_dir is None:
            return model_info(spec.model, spec.width, spec.depth, spec.input_size)
        return kept_model_info(spec.model, spec.width, spec.depth, spec.input_size, cache_dir)
    return source_info(spec.model, source, cache_dir)


_INFO_DIR = "model-info"


def kept_model_info(
    name: str, width: int | None, depth: int, input_size: int | None, cache_dir: Path | str
) -> ModelInfo:
    """``model_info``, counted once per model and torch / timm version and then read back.

    Why: a trial's worker 0 counted the MACs of its model in every trial, and torch's counter
    imports ``torch._dynamo`` first: ~2 CPU-s on the 2-core VM, spent beside the other workers'
    interpreter imports, before anything is timed (issue 44). A sweep runs one model under every
    compiler and batch, so all but the first trial read the figure. The file holds its whole key
    (a hash collision or an older file is recounted) and is written whole or not at all."""
    key = {"name": name, "width": width, "depth": depth, "input_size": input_size, **_versions()}
    text = json.dumps(key, sort_keys=True)
    path = Path(cache_dir) / _INFO_DIR / f"{hashlib.sha256(text.encode()).hexdigest()[:24]}.json"
    try:  # a regular file only: a FIFO put there must not hang the trial
        data = json.loads(safe_files.read_text(path))
        if data.get("key") == key:
            return ModelInfo.from_dict(data["info"])
    except (OSError, NgbError, ValueError, KeyError, TypeError, AttributeError):
        pass  # absent, unreadable, not a file or malformed: count again
    info = model_info(name, width, depth, input_size)
    with contextlib.suppress(OSError):  # a read-only cache costs the next trial a recount
        _write_json(path, {"key": key, "info": info.to_dict()})
    return info


def source_info(name: str, source: ModelSource, cache_dir: Path | str | None = None) -> ModelInfo:
    """Parameters and batch-1 MACs of a user's model (torch counter, or the ONNX graph's)."""
    cache = Path(cache_dir) if cache_dir is not None else None
    found = model_build.info(name, source, cache)
    inputs = found["inputs"]
    return ModelInfo(
        name=name,
        family=None,
        params=int(found["params"]),
        macs=int(found["macs"]),
        input_shape=inputs[0].concrete(1) if inputs else (),
        source=source.describe,
        inputs=model_build.describe_inputs(inputs),
    )


def _versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    found = {"table_format": str(_TABLE_FORMAT)}
    for package in ("torch", "timm"):
        try:
            found[package] = version(package)
        except PackageNotFoundError:
            found[package] = "missing"
    return found


def _read_cache(path: Path, versions: dict[str, str]) -> PaperTable | None:
    try:
        data = json.loads(path.read_text())
        if data.get("versions") != versions:
            return None
        return PaperTable(
            models=tuple(ModelInfo.from_dict(d) for d in data["models"]),
            blocks=tuple(ModelInfo.from_dict(d) for d in data["blocks"]),
            from_cache=True,
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None  # absent, unreadable or stale: recompute


def _write_cache(path: Path, versions: dict[str, str], table: PaperTable) -> None:
    payload = {
        "versions": versions,
        "models": [m.to_dict() for m in table.models],
        "blocks": [b.to_dict() for b in table.blocks],
    }
    _write_json(path, payload)


def _write_json(path: Path, payload: Mapping[str, object]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    # Write-then-rename so a killed run never leaves half a cache file behind.
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    with os.fdopen(fd, "w") as fh:
        json.dump(payload, fh, indent=1)
    os.replace(tmp, path)


def paper_table(
    cache_dir: Path | str | None = None,
    progress: Callable[[int, int, str], None] | None = None,
) -> PaperTable:
    """The paper's Tables IV and V with params and MACs; cached in ``cache_dir`` when given.

    ``progress(done, total, label)`` is called before each row is computed (not on a cache hit).
    """
    versions = _versions()
    path = Path(cache_dir) / _CACHE_NAME if cache_dir is not None else None
    if path is not None:
        cached = _read_cache(path, versions)
        if cached is not None:
            return cached
    rows: list[tuple[str, int | None]] = [(m, None) for m in PAPER_MODELS]
    rows += [(kind, w) for kind, widths in PAPER_BLOCK_WIDTHS.items() for w in widths]
    infos = []
    for i, (name, width) in enumerate(rows):
        if progress is not None:
            progress(i, len(rows), name if width is None else f"{name}{width}")
        infos.append(model_info(name, width=width))
    n_models = len(PAPER_MODELS)
    table = PaperTable(models=tuple(infos[:n_models]), blocks=tuple(infos[n_models:]))
    if path is not None:
        # A read-only cache dir costs a recompute next time, nothing else.
        with contextlib.suppress(OSError):
            _write_cache(path, versions, table)
    return table
