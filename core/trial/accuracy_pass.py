"""The accuracy pass: the compiled model over a whole labelled set, beside eager fp32.

Issue 42: accuracy belongs to the *compiled* model on the device that runs it (OpenVINO picks
bf16 on AMX CPUs, ONNX Runtime and TensorRT fuse and reorder, int8 kernels differ per engine),
not to the PyTorch model on the workstation. So a trial whose settings carry ``accuracy``
(``ngb.core.records.types.AccuracySettings``) runs, in its first worker only:

1. ``prepare`` -- before the compile touches the module, like the ``verify`` reference: load the
   labelled set (``ngb.core.models.labelled_data``), fit its samples to the model's input, and run
   the eager model over all of it in strict fp32, in batches of ``EAGER_BATCH`` where the trial's is
   smaller (a torch module takes any batch; one bound to its own, and an ONNX file, at the trial's
   batch, the last one padded with zeros and trimmed);
2. the compile, first call, warm-up and timed loops, untouched;
3. ``run_compiled`` -- after the timed loops, never inside them: the same compiled object takes
   each batch through ``Compiled.feed`` (new values in its bound buffers: no second compile, no
   other shape) and ``output_numpy``; then ``ngb.core.statistics.accuracy_stats.compare``.

The record lands in ``extra["accuracy"]`` (``AccuracyRecord``) with the seconds each step took;
a pass that cannot run (data that does not fit, a runtime without ``feed``, a model with several
inputs or no class scores, NaN from eager) leaves one line in ``extra["accuracy_error"]`` and
the timed result stands, as a failed profile pass does.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from ngb.core.base.errors import NgbError
from ngb.core.models import labelled_data, labelled_files
from ngb.core.statistics import accuracy_stats

if TYPE_CHECKING:
    from pathlib import Path

    from ngb.core.compilers.base import Compiled
    from ngb.core.models.model_types import Example, Model
    from ngb.core.records.types import AccuracySettings


#: eager's batch for the baseline where the trial's is smaller (the model takes any batch)
EAGER_BATCH = 256


@dataclass
class Prepared:
    """The labelled set fitted to the model, and eager's scores on it."""

    ref: str
    inputs: np.ndarray  # (samples, *sample shape), in the example's dtype where numpy has it
    labels: np.ndarray
    eager: np.ndarray  # (samples, classes) float64
    batch: int
    load_s: float
    eager_s: float


def _example_args(example: Example) -> tuple[object, ...]:
    return tuple(example) if isinstance(example, tuple | list) else (example,)


def prepare(
    settings: AccuracySettings,
    model: Model,
    example: Example,
    name: str,
    cache_dir: Path | str | None = None,
) -> Prepared:
    """Load the set and run eager fp32 over it (see the module docstring). Data that travelled
    with the trial is read from the device's copy (``labelled_files.here``: ``cache_dir``'s
    shipped artifact, else the workstation's path when its hash still matches)."""
    import torch
    from ngb.core.models.model_build import NamedInputs, is_onnx
    from ngb.core.models.models import reference_output
    from ngb.core.models.precision import strict_fp32

    start = time.perf_counter()
    data = labelled_data.load(labelled_files.here(settings, cache_dir))
    args = _example_args(example)
    if len(args) != 1:
        raise NgbError(
            f"the accuracy pass takes a model with one input; {name!r} takes {len(args)}"
        )
    first = args[0]
    if not isinstance(first, torch.Tensor):
        raise NgbError(f"the accuracy pass needs a tensor input; {name!r} takes {type(first)}")
    batch = int(first.shape[0])
    dtype = _numpy_dtype(first)
    inputs = labelled_data.fit_inputs(data, tuple(int(d) for d in first.shape[1:])).astype(dtype)
    load_s = time.perf_counter() - start

    start = time.perf_counter()

    def eager_pass(size: int) -> np.ndarray:
        outputs: list[np.ndarray] = []
        with strict_fp32():
            for chunk, real in chunks(inputs, size, pad=size == batch):
                tensor = torch.from_numpy(chunk).to(device=first.device, dtype=first.dtype)
                fed: Example = (
                    NamedInputs([tensor], example.names)
                    if isinstance(example, NamedInputs)
                    else tensor
                )
                scores = reference_output(model, fed, name)
                outputs.append(_scores(scores, len(chunk), "eager")[:real])
        return np.concatenate(outputs)

    eager: np.ndarray | None = None
    if batch < EAGER_BATCH and not is_onnx(model):
        # eager takes any batch: the set in large batches (1,797 calls at batch 1 cost seconds
        # where 8 calls cost milliseconds); a model bound to its own batch size answers at it
        try:
            eager = eager_pass(EAGER_BATCH)
        except NgbError:
            eager = None
    if eager is None:
        eager = eager_pass(batch)
    classes = eager.shape[1]
    if data.classes > classes:
        raise NgbError(
            f"labelled data {data.name}: labels go up to {data.classes - 1} but the model "
            f"scores {classes} classes"
        )
    if np.isnan(eager).any():
        rows = int(np.isnan(eager).any(axis=1).sum())
        raise NgbError(f"the eager model gave NaN outputs for {rows} of {data.samples} samples")
    return Prepared(
        settings.data, inputs, data.labels, eager, batch, load_s, time.perf_counter() - start
    )


def run_compiled(
    prepared: Prepared, compiled: Compiled, confidence: float = 0.95
) -> accuracy_stats.AccuracyRecord:
    """The compiled model over the prepared set, and the comparison with eager."""
    start = time.perf_counter()
    compiled.drain()  # requests a throughput loop left in flight finish on the timed inputs
    outputs: list[np.ndarray] = []
    for chunk, real in chunks(prepared.inputs, prepared.batch):
        compiled.feed([chunk])
        outputs.append(_scores(compiled.output_numpy(), prepared.batch, "compiled")[:real])
    scores = np.concatenate(outputs)
    compiled_s = time.perf_counter() - start
    start = time.perf_counter()
    record = accuracy_stats.compare(prepared.eager, scores, prepared.labels, confidence)
    stats_s = time.perf_counter() - start
    record["data"] = prepared.ref
    record["batch"] = prepared.batch
    record["eager_s"] = round(prepared.eager_s, 4)
    record["compiled_s"] = round(compiled_s, 4)
    record["pass_s"] = round(prepared.load_s + prepared.eager_s + compiled_s + stats_s, 4)
    return record


def chunks(inputs: np.ndarray, batch: int, pad: bool = True) -> Iterator[tuple[np.ndarray, int]]:
    """Batches of ``batch`` samples and how many of each are real (the last one zero-padded to
    ``batch`` unless ``pad`` is false)."""
    for begin in range(0, len(inputs), batch):
        part = inputs[begin : begin + batch]
        real = len(part)
        if pad and real < batch:
            zeros = np.zeros((batch - real, *part.shape[1:]), dtype=part.dtype)
            part = np.concatenate([part, zeros])
        yield np.ascontiguousarray(part), real


def _scores(out: object, batch: int, who: str) -> np.ndarray:
    scores = np.array(out, dtype=np.float64)
    if scores.ndim != 2 or scores.shape[0] != batch:
        raise NgbError(
            f"the accuracy pass needs (batch, classes) scores; the {who} model gave shape "
            f"{tuple(scores.shape)}"
        )
    return scores


def _numpy_dtype(tensor: object) -> np.dtype:
    """The example's dtype as numpy has it (bfloat16 has no numpy dtype: float32 then, and each
    runtime's ``feed`` casts into its buffer)."""
    import torch

    assert isinstance(tensor, torch.Tensor)
    if tensor.dtype == torch.bfloat16:
        return np.dtype(np.float32)
    return np.dtype(torch.empty(0, dtype=tensor.dtype).numpy().dtype)
