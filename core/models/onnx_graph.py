"""What ngb reads from an ONNX file: its inputs, its parameter count and its MACs.

- Inputs: the graph inputs that are not initializers, in graph order. A symbolic (or unknown)
  first dimension is the batch; any other symbolic dimension must be given a size by the user.
  Declared inputs must name exactly the graph's inputs, with the graph's rank, dtype and fixed
  sizes: a mismatch is one line at sweep validation rather than an error deep inside a runtime.
- Parameters: elements of all initializers (the weights an exporter stores).
- MACs at batch 1, in the convention of the torch counter (``ngb.core.models.models.MACS_COUNTER``):
  matrix work only -- Conv, ConvTranspose, Gemm, MatMul (attention exported from torch is
  MatMuls) -- from shapes found by ONNX shape inference. Elementwise ops are not counted.

``onnx`` is imported inside functions only.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from ngb.core.base.errors import ConfigError, one_line
from ngb.core.models.model_inputs import BATCH, DTYPES, InputSpec, index_range

if TYPE_CHECKING:
    import onnx

_MAC_OPS = ("Conv", "ConvTranspose", "Gemm", "MatMul")


def load(path: Path | str) -> onnx.ModelProto:
    """The ONNX model (weights included), checked; a corrupt file is one ``ConfigError`` line."""
    import onnx

    path = Path(path)
    try:
        model = onnx.load(str(path))
        onnx.checker.check_model(model)
    except Exception as exc:  # noqa: BLE001 - protobuf and checker raise many types
        raise ConfigError(f"{path.name} is not a valid ONNX model: {one_line(exc)}") from None
    return model


def external_files(path: Path) -> tuple[str, ...]:
    """The external data files ``path``'s tensors are stored in (torch's exporter writes
    ``model.onnx.data`` beside a large model), sorted; each must be a regular file in the same
    folder, named plainly, so it can travel with the model into one device folder."""
    import onnx

    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as exc:  # noqa: BLE001 - protobuf raises many types
        raise ConfigError(f"{path.name} is not a valid ONNX model: {one_line(exc)}") from None
    names = set()
    for tensor in _all_tensors(model.graph):
        if tensor.data_location != onnx.TensorProto.EXTERNAL:
            continue
        location = next((e.value for e in tensor.external_data if e.key == "location"), "")
        plain = location and "/" not in location and "\\" not in location
        if not plain or location in (".", ".."):
            raise ConfigError(
                f"{path.name} keeps tensor {tensor.name!r} in {location!r}; ngb takes external "
                "data files beside the model, named without a folder"
            )
        data = path.parent / location
        if not data.is_file():
            raise ConfigError(
                f"{path.name} keeps its weights in {location}, which is not a file beside it"
            )
        names.add(location)
    return tuple(sorted(names))


def _all_tensors(graph: onnx.GraphProto) -> Iterator[onnx.TensorProto]:
    """Every tensor of a graph: initializers and node attributes, subgraphs included."""
    yield from graph.initializer
    for node in graph.node:
        for attr in node.attribute:
            if attr.HasField("t"):
                yield attr.t
            yield from attr.tensors
            if attr.HasField("g"):
                yield from _all_tensors(attr.g)
            for sub in attr.graphs:
                yield from _all_tensors(sub)


def _dtype(elem_type: int) -> str:
    import onnx

    if elem_type == onnx.TensorProto.BFLOAT16:
        return "bfloat16"
    try:
        return str(onnx.helper.tensor_dtype_to_np_dtype(elem_type))
    except (KeyError, ValueError):
        return f"onnx type {elem_type}"


def graph_inputs(model: onnx.ModelProto) -> list[tuple[str, list[int | str | None], str]]:
    """(name, dims, dtype) per real input; a dim is an int, a symbol name, or None if unknown."""
    weights = {init.name for init in model.graph.initializer}
    found = []
    for value in model.graph.input:
        if value.name in weights:
            continue
        tensor = value.type.tensor_type
        dims: list[int | str | None] = []
        for dim in tensor.shape.dim:
            if dim.HasField("dim_value") and dim.dim_value > 0:
                dims.append(int(dim.dim_value))
            else:
                dims.append(dim.dim_param or None)
        found.append((value.name, dims, _dtype(tensor.elem_type)))
    return found


def merge_inputs(path: Path, declared: tuple[InputSpec, ...]) -> tuple[InputSpec, ...]:
    """The inputs to feed ``path``: declared ones checked against the graph, else the graph's."""
    model = load(path)
    graph = graph_inputs(model)
    where = path.name
    by_name = {i.name: i for i in declared}
    if declared and set(by_name) != {name for name, _, _ in graph}:
        raise ConfigError(
            f"{where}: declared inputs {sorted(by_name)} do not match the graph's inputs "
            f"{[name for name, _, _ in graph]}"
        )
    merged = []
    for name, dims, dtype in graph:
        if dtype not in DTYPES:
            raise ConfigError(f"{where}: input {name!r} has unsupported dtype {dtype}")
        given = by_name.get(name)
        if given is None:
            merged.append(_from_graph(where, name, dims, dtype, _gather_rows(model, name)))
            continue
        if given.dtype != dtype:
            raise ConfigError(
                f"{where}: input {name!r} is {dtype} in the graph, declared {given.dtype}"
            )
        if len(given.shape) != len(dims):
            raise ConfigError(
                f"{where}: input {name!r} has {len(dims)} dimensions in the graph "
                f"{_show(dims)}, declared {list(given.shape)}"
            )
        for axis, (want, have) in enumerate(zip(given.shape, dims, strict=True)):
            if isinstance(have, int) and want != have:
                raise ConfigError(
                    f"{where}: input {name!r} dimension {axis} is {have} in the graph "
                    f"{_show(dims)}, declared {want!r}"
                )
        merged.append(given)
    return tuple(merged)


def _show(dims: list[int | str | None]) -> str:
    return "[" + ", ".join("?" if d is None else str(d) for d in dims) + "]"


def _gather_rows(model: onnx.ModelProto, name: str) -> int | None:
    """The rows of the weight table an integer input indexes (``Gather`` on an initializer, what
    an exported embedding becomes): the input's exclusive upper bound; None when none does."""
    shapes = {init.name: list(init.dims) for init in model.graph.initializer}
    bounds = []
    for node in model.graph.node:
        if node.op_type != "Gather" or len(node.input) < 2 or node.input[1] != name:
            continue
        table = shapes.get(node.input[0])
        axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
        if table and -len(table) <= axis < len(table) and table[axis] > 0:
            bounds.append(int(table[axis]))
    return min(bounds) if bounds else None


def _from_graph(
    where: str, name: str, dims: list[int | str | None], dtype: str, rows: int | None = None
) -> InputSpec:
    shape: list[int | str] = []
    for axis, dim in enumerate(dims):
        if isinstance(dim, int):
            shape.append(dim)
        elif axis == 0:
            shape.append(BATCH)
        else:
            raise ConfigError(
                f"{where}: input {name!r} dimension {axis} is symbolic ({dim or '?'}); "
                "declare the input's shape in the sweep (inputs = [...])"
            )
    rng, note = None, None
    if DTYPES[dtype] and dtype != "bool":
        rng, note = index_range(rows, "the graph")
    return InputSpec(name, tuple(shape), dtype, rng, note)


def count_params(model: onnx.ModelProto) -> int:
    return sum(math.prod(init.dims) for init in model.graph.initializer)


def count_macs(model: onnx.ModelProto, inputs: tuple[InputSpec, ...], batch: int = 1) -> int:
    """MACs of one forward pass at ``batch`` (see the module docstring for what counts)."""
    import onnx

    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    concrete = {i.name: i.concrete(batch) for i in inputs}
    for value in copy.graph.input:
        if value.name in concrete:
            dims = value.type.tensor_type.shape.dim
            for dim, size in zip(dims, concrete[value.name], strict=True):
                dim.Clear()
                dim.dim_value = size
    inferred = onnx.shape_inference.infer_shapes(copy)
    shapes: dict[str, list[int]] = {}
    for value in [*inferred.graph.input, *inferred.graph.value_info, *inferred.graph.output]:
        dims = value.type.tensor_type.shape.dim
        if all(d.HasField("dim_value") for d in dims):
            shapes[value.name] = [int(d.dim_value) for d in dims]
    for init in inferred.graph.initializer:
        shapes[init.name] = list(init.dims)
    return sum(_node_macs(node, shapes) for node in inferred.graph.node if node.op_type in _MAC_OPS)


def _node_macs(node: onnx.NodeProto, shapes: dict[str, list[int]]) -> int:
    a = shapes.get(node.input[0])
    b = shapes.get(node.input[1]) if len(node.input) > 1 else None
    out = shapes.get(node.output[0])
    if a is None or b is None or out is None:
        return 0  # shape unknown after inference: not counted rather than guessed
    if node.op_type == "Conv":
        return math.prod(out) * math.prod(b[1:])
    if node.op_type == "ConvTranspose":
        return math.prod(a) * math.prod(b[1:])
    if node.op_type == "Gemm":
        trans_a = any(att.name == "transA" and att.i for att in node.attribute)
        return math.prod(out) * (a[0] if trans_a else a[-1])
    return math.prod(out) * a[-1]  # MatMul
