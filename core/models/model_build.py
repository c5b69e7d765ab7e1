"""Building a user's model (``ModelSource``) and its example inputs on the machine that measures.

- timm: ``timm.create_model(ref, pretrained=False, **kwargs)``; default input from the pretrained
  config, with ``img_size`` from kwargs when given.
- python: the code artifact goes on ``sys.path`` (see ``ngb.core.models.model_sources``), the
  factory is called with kwargs and must return an ``nn.Module``. Inputs must be declared.
- pt2: ``torch.export.load(path).module()``; inputs default to the program's placeholders (a
  symbolic first dimension is the batch); an integer input's range comes from the lookup that
  consumes it (embedding rows), else 0..1 is assumed and ``describe_inputs`` says so.
- onnx: an ``OnnxModel`` handle (path + inputs) that only ONNX-taking compilers accept; the
  reference output for ``max_abs_err`` comes from ONNX Runtime with graph optimisations off.

Examples are ``NamedInputs``: a tuple of tensors passed positionally in the declared order whose
``names`` become the ONNX input names (``ngb.core.compilers.onnx_export.input_names``). Weights come
from ``WEIGHT_SEED`` and inputs from ``EXAMPLE_SEED``, as for the paper's models.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, TypedDict

from ngb.core.base.capture import Captured, captured_stderr
from ngb.core.base.errors import ConfigError, NgbError, one_line
from ngb.core.models.model_basics import (
    EXAMPLE_SEED,
    WEIGHT_SEED,
    count_macs,
    count_torch_params,
    resolve_model,
)
from ngb.core.models.model_inputs import index_range
from ngb.core.models.model_sources import (
    BATCH,
    DEFAULT_INT_RANGE,
    DTYPES,
    InputSpec,
    ModelSource,
    locate,
)
from ngb.core.models.onnx_model import (
    OnnxModel as OnnxModel,  # re-exported (the compilers import it here)
)

if TYPE_CHECKING:
    import torch
    from ngb.core.models.model_types import Array, Example, Model
    from torch import nn


class NamedInputs(tuple["torch.Tensor", ...]):
    """Positional model inputs that also carry their names."""

    names: tuple[str, ...]

    def __new__(cls, tensors: Sequence[torch.Tensor], names: Sequence[str]) -> NamedInputs:
        obj = super().__new__(cls, tensors)
        obj.names = tuple(names)
        return obj

    def __reduce__(
        self,
    ) -> tuple[
        type[NamedInputs], tuple[tuple[torch.Tensor, ...], tuple[str, ...]]
    ]:  # pickling (a trial may hand its example to a child)
        return (NamedInputs, (tuple(self), self.names))


def map_inputs(example: Example, fn: Callable[[torch.Tensor], torch.Tensor]) -> Example:
    """``fn`` applied to every input tensor, keeping ``NamedInputs`` names (a bare tensor stays
    bare), e.g. to move inputs or cast the floating ones."""
    if isinstance(example, NamedInputs):
        return NamedInputs([fn(t) for t in example], example.names)
    if isinstance(example, tuple | list):
        return tuple(fn(t) for t in example)
    return fn(example)


class _ProgramModule:
    """Holder of the ``nn.Module`` wrapper class for a loaded ``torch.export`` program (defined
    on first use so torch stays a lazy import)."""

    cls: type[nn.Module] | None = None

    @classmethod
    def wrap(cls, inner: nn.Module) -> nn.Module:
        if cls.cls is None:
            from torch import nn

            class ExportedProgramModule(nn.Module):
                """An exported program's module. It is already in inference form and refuses
                ``eval()``/``train()``, which every compiler calls; here they only set the flag."""

                def __init__(self, program_module: nn.Module) -> None:
                    super().__init__()
                    self.program = program_module

                def forward(self, *args: torch.Tensor) -> object:
                    return self.program(*args)

                def train(self, mode: bool = True) -> ExportedProgramModule:
                    self.training = mode
                    return self

            cls.cls = ExportedProgramModule
        return cls.cls(inner)


def is_onnx(model: object) -> bool:
    return isinstance(model, OnnxModel)


def count_params(model: Model) -> int:
    """Parameters of a torch module; for an ONNX model, the elements of its initializers."""
    if isinstance(model, OnnxModel):
        from ngb.core.models import onnx_graph

        return onnx_graph.count_params(onnx_graph.load(model.onnx_path))
    return count_torch_params(model)


# ---------------------------------------------------------------- inputs


def make_example(
    inputs: Sequence[InputSpec], batch: int, device: str | torch.device = "cpu"
) -> NamedInputs:
    """Deterministic example tensors for ``inputs`` at ``batch`` (private generator)."""
    import torch

    generator = torch.Generator().manual_seed(EXAMPLE_SEED)
    tensors = []
    for spec in inputs:
        shape = spec.concrete(batch)
        dtype = getattr(torch, spec.dtype)
        if DTYPES[spec.dtype]:
            low, high = spec.range or DEFAULT_INT_RANGE
            if spec.dtype == "bool":
                low, high = 0, 2
            tensor = torch.randint(low, high, shape, generator=generator).to(dtype)
        else:
            tensor = torch.randn(shape, generator=generator).to(dtype)
        tensors.append(tensor.to(device))
    return NamedInputs(tensors, [i.name for i in inputs])


def _timm_inputs(ref: str, kwargs: dict[str, object]) -> tuple[InputSpec, ...]:
    from timm.models import get_pretrained_cfg

    cfg = get_pretrained_cfg(ref)
    channels, height, width = cfg.input_size if cfg is not None else (3, 224, 224)
    size = kwargs.get("img_size")
    if isinstance(size, int):
        height = width = size
    elif isinstance(size, list | tuple) and len(size) == 2:
        height, width = size
    chans = kwargs.get("in_chans", channels)
    if not isinstance(chans, int) or isinstance(chans, bool):
        raise ConfigError(f"timm model {ref!r}: in_chans must be an integer, got {chans!r}")
    return (InputSpec("input", (BATCH, chans, height, width)),)


def _program_inputs(program: torch.export.ExportedProgram, where: str) -> tuple[InputSpec, ...]:
    """User inputs of an exported program from its placeholders' fake tensors."""
    user = set(program.graph_signature.user_inputs)
    found = []
    for node in program.graph.nodes:
        if node.op != "placeholder" or node.name not in user:
            continue
        value = node.meta.get("val")
        if value is None or not hasattr(value, "shape"):
            raise ConfigError(f"{where}: input {node.name!r} is not a tensor; declare inputs")
        shape: list[int | str] = []
        for axis, dim in enumerate(value.shape):
            if isinstance(dim, int):
                shape.append(dim)
            elif axis == 0:
                shape.append(BATCH)
            else:
                raise ConfigError(
                    f"{where}: input {node.name!r} dimension {axis} is dynamic; declare inputs"
                )
        dtype = str(value.dtype).removeprefix("torch.")
        rng, note = None, None
        if DTYPES.get(dtype) and dtype != "bool":
            rng, note = index_range(_index_bound(node), "the program")
        found.append(InputSpec(node.name, tuple(shape), dtype, rng, note))
    return tuple(found)


# ops an integer input passes through unchanged in value on its way to a lookup
_VALUE_KEEPING = {
    "view", "reshape", "_unsafe_view", "clone", "contiguous", "unsqueeze", "squeeze", "flatten",
    "expand", "slice", "select", "permute", "transpose", "t", "_assert_tensor_metadata",
    "alias", "detach", "lift_fresh_copy",
}  # fmt: skip


def _index_bound(placeholder: torch.fx.Node) -> int | None:
    """The exclusive upper bound of an integer input's values, from the program itself: the
    rows of the embedding table (or ``index_select`` source) it indexes, the class count of a
    ``one_hot``. torch.export keeps no value range for a tensor input (its range constraints
    bound symbolic sizes only), so the lookup that consumes the input is what bounds it. The
    smallest bound wins when there are several; None when nothing bounds it."""
    bounds: list[int] = []
    todo, seen = [placeholder], set()
    while todo:
        node = todo.pop()
        if node in seen:
            continue
        seen.add(node)
        for user in node.users:
            op = getattr(user.target, "__name__", str(user.target)).split(".")[0]
            if op in _VALUE_KEEPING and user.args and user.args[0] is node:
                todo.append(user)
            elif op == "embedding" and len(user.args) > 1 and user.args[1] is node:
                bounds += _rows(user.args[0], 0)
            elif op == "index_select" and len(user.args) > 2 and user.args[2] is node:
                bounds += _rows(user.args[0], int(user.args[1]))  # type: ignore[arg-type]
            elif op == "one_hot" and len(user.args) > 1 and isinstance(user.args[1], int):
                bounds += [user.args[1]] if user.args[1] > 0 else []
    return min(bounds) if bounds else None


def _rows(table: object, dim: int) -> list[int]:
    value = getattr(table, "meta", {}).get("val")
    shape = getattr(value, "shape", None)
    if shape is None or not -len(shape) <= dim < len(shape):
        return []
    size = shape[dim]
    return [int(size)] if isinstance(size, int) and size > 0 else []


# ---------------------------------------------------------------- building


def build(
    name: str, source: ModelSource, cache_dir: Path | None, device: str = "cpu"
) -> tuple[Model, tuple[InputSpec, ...]]:
    """The model (eval mode, random weights from ``WEIGHT_SEED``) and the inputs it takes."""
    if source.kind == "onnx":
        return OnnxModel(locate(source.artifacts[0], cache_dir), source.inputs), source.inputs
    return _build_torch(name, source, cache_dir, device)


def _build_torch(
    name: str, source: ModelSource, cache_dir: Path | None, device: str
) -> tuple[nn.Module, tuple[InputSpec, ...]]:
    """``build`` for the kinds that give a torch module (timm, pt2, python)."""
    import torch

    with torch.device(device), torch.random.fork_rng(devices=[]):
        torch.manual_seed(WEIGHT_SEED)
        if source.kind == "timm":
            model = _build_timm(source)
            inputs = source.inputs or _timm_inputs(source.ref, dict(source.kwargs))
        elif source.kind == "pt2":
            path = locate(source.artifacts[0], cache_dir)
            program = load_program(path)
            model = _ProgramModule.wrap(program.module())
            inputs = source.inputs or _program_inputs(program, path.name)
        else:
            model = _call_factory(source, cache_dir)
            inputs = source.inputs
            if not inputs:
                raise ConfigError(f"model {name!r}: python sources need inputs = [...]")
    return model.eval(), inputs


def load_program(path: Path) -> torch.export.ExportedProgram:
    """``torch.export.load``; a file it cannot read is one line (``NgbError``)."""
    import torch

    logged = Captured()
    try:
        # torch logs its own traceback before raising: folded into the one line
        with captured_stderr() as logged:
            return torch.export.load(str(path))
    except Exception as exc:  # noqa: BLE001 - a corrupt or foreign file
        said = logged.last_line()
        extra = f" (torch: {said})" if said and said not in str(exc) else ""
        raise NgbError(
            f"cannot load exported program {path.name}: {one_line(exc)}{extra}"
        ) from None


def _build_timm(source: ModelSource) -> nn.Module:
    import timm

    if not timm.is_model(source.ref):
        resolve_model(source.ref)  # the one-line unknown-name error with close matches
    try:
        return timm.create_model(source.ref, pretrained=False, **source.kwargs)
    except Exception as exc:  # noqa: BLE001 - bad kwargs surface as many types
        raise ConfigError(
            f"cannot build timm model {source.ref!r} with {dict(source.kwargs)}: {one_line(exc)}"
        ) from None


def _call_factory(source: ModelSource, cache_dir: Path | None) -> nn.Module:
    factory = import_factory(source, cache_dir)
    try:
        with no_bytecode_files():  # a factory may import the user's other modules
            model = factory(**source.kwargs)
    except Exception as exc:  # noqa: BLE001 - user code
        raise NgbError(f"factory {source.ref} raised {one_line(exc)}") from None
    from torch import nn

    if not isinstance(model, nn.Module):
        raise NgbError(f"factory {source.ref} returned {type(model).__name__}, not an nn.Module")
    return model


def import_factory(source: ModelSource, cache_dir: Path | None) -> Callable[..., object]:
    """The factory callable; its code artifact (if any) is put on ``sys.path`` first."""
    target, _, attr = source.ref.rpartition(":")
    try:
        with no_bytecode_files():
            if source.artifacts and source.artifacts[0].role == "folder":
                folder = locate(source.artifacts[0], cache_dir)
                module = import_file(folder, target, source.artifacts[0].sha256)
            else:
                if source.artifacts:
                    where = locate(source.artifacts[0], cache_dir)
                    _forget_other_copies(target.split(".", 1)[0], where)
                    _on_path(where.parent)
                module = importlib.import_module(target)
    except NgbError:
        raise
    except Exception as exc:  # noqa: BLE001 - user code raises anything at import
        raise NgbError(f"cannot import {target}: {one_line(exc)}") from None
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise NgbError(f"{target} has no function {attr!r}")
    return factory


@contextmanager
def no_bytecode_files() -> Iterator[None]:
    """Import the user's code without writing ``__pycache__`` beside it: ngb leaves their folder
    as it found it (Python caches bytecode there unless PYTHONDONTWRITEBYTECODE is set)."""
    before = sys.dont_write_bytecode
    sys.dont_write_bytecode = True
    try:
        yield
    finally:
        sys.dont_write_bytecode = before


def _on_path(folder: Path) -> None:
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))


def _forget_other_copies(top: str, where: Path) -> None:
    """Drop an already imported package of the same name from another folder (another model's)."""
    loaded = sys.modules.get(top)
    origin = getattr(loaded, "__file__", None) if loaded is not None else None
    if origin and not Path(origin).resolve().is_relative_to(where.resolve()):
        for name in [n for n in sys.modules if n == top or n.startswith(top + ".")]:
            del sys.modules[name]


def import_file(folder: Path, rel: str, digest: str) -> ModuleType:
    """The python file ``folder/rel`` imported under a name of its own (``digest`` tells two
    copies apart), its folder on ``sys.path`` so its sibling modules import as beside it."""
    path = folder / rel
    if not path.is_file():
        raise NgbError(f"python file {rel} not found in {folder}")
    _on_path(folder)  # sibling modules import as they would next to the file
    name = f"ngb_user_{digest[:12]}_{path.stem}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


def create(
    name: str, source: ModelSource, batch: int, device: torch.device | str, cache_dir: Path | None
) -> tuple[Model, NamedInputs]:
    """Model and example batch for a trial (ONNX examples stay on the CPU; runtimes copy them)."""
    model, inputs = build(name, source, cache_dir)
    ModelSource(source.kind, source.ref, source.kwargs, inputs).check_batch(batch, name)
    if isinstance(model, OnnxModel):
        return model, make_example(inputs, batch)
    return model.to(device), make_example(inputs, batch, device)


def reference_output(model: Model, example: Example, name: str = "model") -> Array:
    """The output every compiler is compared with (first output, numpy)."""
    import torch
    from ngb.core.models.model_basics import to_numpy

    args = tuple(example) if isinstance(example, tuple | list) else (example,)
    try:
        if isinstance(model, OnnxModel):
            return to_numpy(model.reference(args))
        with torch.inference_mode():
            return to_numpy(model(*args))
    except Exception as exc:  # noqa: BLE001 - a shape the model does not take, mostly
        shapes = ", ".join(f"{tuple(a.shape)} {str(a.dtype).removeprefix('torch.')}" for a in args)
        raise NgbError(f"model {name!r} rejected its inputs ({shapes}): {one_line(exc)}") from None


class ModelFacts(TypedDict):
    """What ``info`` finds: parameters, batch-1 MACs and the inputs the model takes."""

    params: int
    macs: int
    inputs: tuple[InputSpec, ...]


def info(name: str, source: ModelSource, cache_dir: Path | None) -> ModelFacts:
    """Params, batch-1 MACs and the inputs of a user's model (built on ``meta`` when possible)."""
    if source.kind == "onnx":
        from ngb.core.models import onnx_graph

        graph = onnx_graph.load(locate(source.artifacts[0], cache_dir))
        return {
            "params": onnx_graph.count_params(graph),
            "macs": onnx_graph.count_macs(graph, source.inputs),
            "inputs": source.inputs,
        }

    def measure(device: str) -> ModelFacts:
        model, inputs = _build_torch(name, source, cache_dir, device)
        example = make_example(inputs, 1, device)
        return {
            "params": count_torch_params(model),
            "macs": count_macs(model, example),
            "inputs": inputs,
        }

    if source.kind != "pt2":
        try:
            return measure("meta")
        except NgbError:
            raise
        except Exception:  # noqa: BLE001, S110 - an op without a meta kernel: count on CPU
            pass
    return measure("cpu")


def describe_inputs(inputs: Sequence[InputSpec]) -> str:
    """``tokens int64[batch,16] 0..999; mask bool[batch,16]`` for listings."""
    parts = []
    for i in inputs:
        text = f"{i.name} {i.dtype}[{','.join(map(str, i.shape))}]"
        if i.range is not None:
            text += f" {i.range[0]}..{i.range[1] - 1}"
        if i.range_note:
            text += f" ({i.range_note})"
        parts.append(text)
    return "; ".join(parts)
