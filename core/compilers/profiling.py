"""Per-operator profiles: where a compiled model's time goes, in one vocabulary for every runtime.

A profile pass is apart from the timed measurement (profilers slow a run: ONNX Runtime's trace
costs several times a plain call on small kernels): a process builds the model, compiles it with
the runtime's own profiler switched on (``CompileContext.profile``), runs ``warmup`` calls, then
``calls`` profiled calls, and reads what the runtime recorded:

- eager (identity), TorchScript: ``torch.profiler`` (CPU activity), each operator the model
  called (the outermost aten event, its time everything below it), so the records add up to the
  time spent inside the profiled calls without counting a wrapper and what it wraps twice; the
  batch norms TorchScript's freeze folded into convolutions mark those fused; its fusion
  groups (``prim::FusionGroup``, ``prim::TensorExprGroup``, ``prim::DifferentiableGraph``) and
  Inductor's generated kernels (``cpp_fused_*``, ``triton_*``) count as fused kernels;
- ONNX Runtime: its JSON trace (``SessionOptions.enable_profiling``), the ``Node`` events of the
  last ``calls`` runs: each kernel's node name (the ONNX node it runs, after ORT's graph
  optimisations) and op type; the fused ones and what they absorbed are read from the optimised
  model ORT saves beside the trace (``profile_graphs.ort_fusions``);
- OpenVINO: the performance counters (``PERF_COUNT``) of a one-stream profile build, read
  before and after the profiled calls (they are a running mean over the stream's calls):
  each executed node's real time per call, its layer type and the kernel that ran
  (``exec_type``); the runtime model's ``originalLayersNames`` name the source operators of a
  node that fused several.

Every record gets an operator class (``classify``: convolution, matmul/linear, attention,
normalisation, activation/elementwise, pooling, layout/copy, other) and whether it is a fused
kernel; the kernel count per inference is itself a figure (fusion shows as fewer kernels). The
profiled latency (wall time per call with the profiler on) is reported beside the plain latency
(the same compiled model's calls without it, measured first), so the profiler's overhead is
visible rather than hidden in the shares.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from ngb.core.base.errors import UnsupportedTrial

OP_CLASSES = (
    "convolution",
    "matmul/linear",
    "attention",
    "normalisation",
    "activation/elementwise",
    "pooling",
    "layout/copy",
    "other",
)

#: (class, words that name it in an op type or kernel name, compared in lower case); the first
#: class with a matching word wins, so "attention" is tried before "matmul"
_CLASS_WORDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("attention", ("attention", "sdpa", "scaled_dot_product", "_flash", "softmax")),
    ("convolution", ("conv", "convolution", "mkldnn_convolution", "brgconv")),
    ("matmul/linear", ("matmul", "gemm", "addmm", "linear", "::mm", "bmm", "fullyconnected",
                       "innerproduct", "einsum", "baddbmm")),
    ("normalisation", ("norm", "batchnorm", "layernorm", "layer_norm", "batch_norm",
                       "instancenorm", "mvn", "rmsnorm", "normalize")),
    ("pooling", ("pool", "reducemean", "globalaverage", "adaptive_avg", "mean")),
    ("layout/copy", ("reorder", "transpose", "permute", "reshape", "view", "copy", "contiguous",
                     "concat", "cat", "split", "slice", "gather", "flatten", "squeeze",
                     "unsqueeze", "expand", "clone", "to_dense", "to_mkldnn", "memcpy", "pad",
                     "as_strided", "select", "stack", "chunk", "narrow", "_to_copy", "convert",
                     "shapeof", "broadcast", "tile")),
    ("activation/elementwise", ("relu", "gelu", "silu", "sigmoid", "tanh", "hardswish", "add",
                                "mul", "sub", "div", "eltwise", "erf", "exp", "clamp", "clip",
                                "pow", "sqrt", "where", "hardsigmoid", "swish", "elu", "neg",
                                "subgraph", "fused")),
)  # fmt: skip

#: precision conversions: OpenVINO's Convert; int8's quantise steps (torch's, ONNX's Q/DQ nodes)
_CONVERSIONS = ("convert", "quantize_per", "dequantize", "quantizelinear", "fake_quant")

#: fused kernels: what a compiler made of several operators
_FUSED = re.compile(
    r"(^|::|_)(fused|fusiongroup|tensorexprgroup|differentiablegraph)|^cpp_fused|^triton_|"
    r"^Fused|subgraph|"
    r"(conv\w*|linear|add|addmm|bn)_relu",  # torch's quantised kernels with the ReLU folded in
    re.IGNORECASE,
)


def classify(*names: str) -> str:
    """The operator class of a kernel from its op type and name (the first that says)."""
    for name in names:
        lowered = name.lower()
        if any(w in lowered for w in _CONVERSIONS):  # not a conv, not a linear layer
            return "layout/copy"
        for cls, words in _CLASS_WORDS:
            if any(w in lowered for w in words):
                return cls
    return "other"


def is_fused(*names: str) -> bool:
    return any(_FUSED.search(n) for n in names if n)


@dataclass(frozen=True)
class KernelRecord:
    """One kernel (or operator) as the runtime reports it, per inference."""

    name: str  # the runtime's kernel or node name
    op_type: str  # the runtime's operator type (aten::conv2d, Conv, Convolution ...)
    op_class: str  # one of OP_CLASSES
    fused: bool
    us_per_inference: float  # time spent in it per inference (self time for torch ops)
    calls_per_inference: float
    source_ops: tuple[str, ...] = ()  # the model's operators it came from, where said
    kernel: str = ""  # the implementation that ran (OpenVINO's exec_type), where said


@dataclass
class Profile:
    """A profile pass of one compiled model."""

    compiler: str
    profiler: str  # which tool recorded it
    calls: int
    plain_ms: float  # wall ms per call with the profiler off (the same compiled model)
    profiled_ms: float  # wall ms per call with it on
    records: list[KernelRecord] = field(default_factory=list)
    note: str = ""
    precision: str = ""  # what ran (``Compiled.precision``); "" when not read back
    # the timed trial's ms per call (batch / throughput) where the pass followed one, so the
    # profiled latency is read beside what the timed workers measured, overhead in view
    timed_ms: float | None = None
    # requests that timed trial kept in flight: with k, a call finished every timed ms while each
    # took up to k times that, and the pass (one call at a time) reads up to k times the figure.
    # OpenVINO keeps 2 on the 2-core VM: its plain calls read 1.9-2.0x the timed ms there.
    timed_in_flight: int = 1

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> Profile:
        """What ``to_dict`` wrote (a trial's ``extra["profile"]``, through JSON)."""
        records = data.get("records")
        timed = data.get("timed_ms")
        return cls(
            compiler=str(data["compiler"]), profiler=str(data["profiler"]),
            calls=_int(data["calls"]), plain_ms=_float(data["plain_ms"]),
            profiled_ms=_float(data["profiled_ms"]), note=str(data.get("note") or ""),
            precision=str(data.get("precision") or ""),
            timed_ms=None if timed is None else _float(timed),
            timed_in_flight=requests_in_flight(data, "timed_in_flight"),
            records=[_record(r) for r in records if isinstance(r, Mapping)]
            if isinstance(records, list) else [],
        )  # fmt: skip

    @property
    def kernel_ms(self) -> float:
        """Time per inference the records account for."""
        return sum(r.us_per_inference for r in self.records) / 1000.0

    @property
    def kernels_per_inference(self) -> float:
        return sum(r.calls_per_inference for r in self.records)

    def by_class(self) -> dict[str, float]:
        """Milliseconds per inference per operator class (every class present, 0 where none)."""
        out = dict.fromkeys(OP_CLASSES, 0.0)
        for r in self.records:
            out[r.op_class] += r.us_per_inference / 1000.0
        return out

    def top(self, n: int = 10) -> list[KernelRecord]:
        return sorted(self.records, key=lambda r: -r.us_per_inference)[:n]

    def to_dict(self) -> dict[str, object]:
        return {
            "compiler": self.compiler, "profiler": self.profiler, "calls": self.calls,
            "plain_ms": self.plain_ms, "profiled_ms": self.profiled_ms, "note": self.note,
            "precision": self.precision, "timed_ms": self.timed_ms,
            "timed_in_flight": self.timed_in_flight,
            "records": [asdict(r) for r in self.records],
        }  # fmt: skip


def requests_in_flight(extra: object, name: str = "requests_in_flight") -> int:
    """Requests a timed trial kept in flight (a result's ``extra["requests_in_flight"]``), 1
    where unsaid or not a count above 1."""
    value = extra.get(name) if isinstance(extra, Mapping) else None
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 1 else 1


def _float(value: object) -> float:
    if not isinstance(value, int | float | str):
        raise ValueError(f"not a number: {value!r}")
    return float(value)


def _int(value: object) -> int:
    return int(_float(value))


def _record(data: Mapping[str, object]) -> KernelRecord:
    sources = data.get("source_ops")
    return KernelRecord(
        name=str(data["name"]), op_type=str(data["op_type"]), op_class=str(data["op_class"]),
        fused=bool(data["fused"]), us_per_inference=_float(data["us_per_inference"]),
        calls_per_inference=_float(data["calls_per_inference"]),
        source_ops=tuple(str(s) for s in sources) if isinstance(sources, list | tuple) else (),
        kernel=str(data.get("kernel") or ""),
    )  # fmt: skip


# ---------------------------------------------------------------- per runtime


def wall_ms(run: Callable[[], object], calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        run()
    return (time.perf_counter() - start) * 1000.0 / calls


def torch_records(
    run: Callable[[], object], calls: int, folded: Mapping[str, int] | None = None
) -> tuple[list[KernelRecord], float]:
    """``torch.profiler`` over ``calls`` calls: each operator the model called, per inference,
    and the wall ms per call under the profiler.

    An operator is an outermost aten (or prim) event: ``aten::conv2d`` counts once, its time
    that of everything it called (``aten::convolution`` -> ``aten::_convolution`` ->
    ``aten::mkldnn_convolution``), so 20 convolutions read 20, not 80 wrappers. Events with no
    ``::`` (TorchScript's ``forward``) are not operators: their operators are looked for inside,
    their own time kept as a record of no calls. ``folded``: the operators TorchScript's freeze
    folded into others (``_folded_ops``), marked on the kernels that absorbed them."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    with torch.inference_mode(), profile(activities=[ProfilerActivity.CPU]) as prof:
        wall = wall_ms(run, calls)
    total: dict[str, float] = {}
    count: dict[str, int] = {}
    pending = [e for e in prof.events() if e.cpu_parent is None]
    while pending:
        event = pending.pop()
        name = str(event.name)
        if "::" not in name and event.cpu_children:  # a frame, not an operator: look inside
            pending += event.cpu_children
            key = f"{name} (own time)"
            total[key] = total.get(key, 0.0) + float(event.self_cpu_time_total)
            count.setdefault(key, 0)
            continue
        total[name] = total.get(name, 0.0) + float(event.cpu_time_total)
        count[name] = count.get(name, 0) + 1
    records = [
        KernelRecord(
            name=name, op_type=name, op_class=classify(name), fused=is_fused(name),
            us_per_inference=us / calls, calls_per_inference=count[name] / calls,
        )
        for name, us in total.items()
        if us > 0
    ]  # fmt: skip
    return _mark_folded(records, folded or {}), wall


#: what TorchScript's freeze folds into a convolution or linear layer before it
FOLDABLE = ("aten::batch_norm", "aten::add", "aten::sub", "aten::mul", "aten::div")


def _mark_folded(records: list[KernelRecord], folded: Mapping[str, int]) -> list[KernelRecord]:
    """The convolutions (then linear layers) that absorbed the ``folded`` operators, marked
    fused: one absorbed operator a call; a record only some of whose calls absorbed one is split
    in two, its time shared by calls."""
    left = sum(folded.values())
    if left <= 0:
        return records
    what = tuple(sorted(folded))
    out = []
    for r in sorted(records, key=lambda r: r.op_class != "convolution"):
        calls = r.calls_per_inference
        if left <= 0 or calls <= 0 or r.op_class not in ("convolution", "matmul/linear"):
            out.append(r)
            continue
        took = min(float(left), calls)
        left -= int(took)
        fused = replace(r, fused=True, source_ops=(r.name, *what))
        if took >= calls:
            out.append(fused)
            continue
        share = took / calls
        out += [
            replace(fused, name=f"{r.name} (folded)", calls_per_inference=took,
                    us_per_inference=r.us_per_inference * share),
            replace(r, calls_per_inference=calls - took,
                    us_per_inference=r.us_per_inference * (1 - share)),
        ]  # fmt: skip
    return out


def ort_records(
    trace: Path, calls: int, fusions: Mapping[str, tuple[str, ...]] | None = None
) -> list[KernelRecord]:
    """ONNX Runtime's JSON trace: the ``Node`` kernel events of the last ``calls`` runs.
    ``fusions`` (``profile_graphs.ort_fusions``: the optimised graph ORT saved) says which
    nodes are fused and what they absorbed; without it only ``Fused*`` op types count."""
    events = json.loads(trace.read_text())
    runs = sorted(
        (e for e in events if e.get("cat") == "Session" and e.get("name") == "model_run"),
        key=lambda e: e["ts"],
    )
    if not runs:
        return []
    start = runs[-calls]["ts"] if len(runs) >= calls else runs[0]["ts"]
    total: dict[str, list[float]] = {}
    kinds: dict[str, str] = {}
    for e in events:
        name = str(e.get("name", ""))
        if e.get("cat") != "Node" or not name.endswith("_kernel_time") or e["ts"] < start:
            continue
        node = name.removesuffix("_kernel_time")
        kinds[node] = str(e.get("args", {}).get("op_name", ""))
        total.setdefault(node, []).append(float(e.get("dur", 0.0)))
    counted = min(calls, len(runs))
    fused = fusions or {}
    return [
        KernelRecord(
            name=node, op_type=kinds[node], op_class=classify(kinds[node], node),
            fused=node in fused or is_fused(kinds[node]),
            us_per_inference=sum(durs) / counted,
            calls_per_inference=len(durs) / counted, source_ops=fused.get(node, (node,)),
        )
        for node, durs in total.items()
    ]  # fmt: skip


def openvino_records(
    before: Iterable[object],
    after: Iterable[object],
    calls_before: int,
    calls: int,
    origins: dict[str, tuple[str, ...]],
) -> list[KernelRecord]:
    """Each executed node's time per call over the ``calls`` calls between two readings of one
    stream's performance counters (``get_profiling_info``), ``before`` after its first
    ``calls_before`` calls and ``after`` at the end. The CPU plugin's ``real_time`` is a running
    mean over every call the stream has served, not the last call's time (measured with OpenVINO
    2026.4: one slow call of 30 ms among calls of 60 us raised the reading to 1.5 ms, and it fell
    back as 1/n over the next calls), so the calls' own total is the difference of the two
    readings times their counts. The readings are whole microseconds, so a node's figure is
    within about 1 us per call. An ``OPTIMIZED_OUT`` node was fused into another and is left
    out; a node that ran in neither reading has no record."""
    start = _mean_us(before)
    end = _mean_us(after)
    out = []
    for name, (us, node_type, exec_type) in end.items():
        earlier = start.get(name, (0.0, "", ""))[0]
        total = us * (calls_before + calls) - earlier * calls_before
        sources = origins.get(name, ())
        out.append(
            KernelRecord(
                name=name, op_type=node_type, op_class=classify(node_type, name),
                fused=len(_operators(sources)) > 1 or is_fused(node_type),
                us_per_inference=max(0.0, total) / calls,
                calls_per_inference=1.0, source_ops=sources, kernel=exec_type,
            )
        )  # fmt: skip
    return out


def _mean_us(info: Iterable[object]) -> dict[str, tuple[float, str, str]]:
    """One reading of OpenVINO's counters: each executed node's mean real time in microseconds,
    its layer type and the kernel that ran it (``exec_type``)."""
    out = {}
    for item in info:
        if "EXECUTED" not in str(getattr(item, "status", "")):
            continue
        real = getattr(item, "real_time", None)
        seconds = getattr(real, "total_seconds", None)  # a datetime.timedelta
        us = float(seconds()) * 1e6 if callable(seconds) else 0.0
        kinds = (str(getattr(item, "node_type", "")), str(getattr(item, "exec_type", "")))
        out[str(getattr(item, "node_name", ""))] = (us, *kinds)
    return out


def _operators(sources: Sequence[str]) -> set[str]:
    """The model's operators among a node's ``originalLayersNames``: OpenVINO reads an ONNX Conv
    with a bias as ``.../Conv/WithoutBiases`` and its bias add ``.../Conv``, one operator."""
    return {name.removesuffix("/WithoutBiases") for name in sources}


def tvm_records(
    vm: object, run: Callable[[], object], calls: int, sync: Callable[[], None] | None = None
) -> tuple[list[KernelRecord], float]:
    """TVM's Relax VM: its instrument hook (``VirtualMachine.set_instrument``, called before and
    after each Call instruction) times each called function -- a TIR kernel (``conv2d``,
    ``fused_conv2d_add_relu``) or a VM builtin (allocation, reshape) -- over ``calls`` calls;
    the records and the wall ms per call under the hook. (TVM 0.2x has no ``profile=True`` VM
    any more; on a GPU ``sync`` waits for each kernel, so its time is the kernel's.)"""
    total: dict[str, float] = {}
    count: dict[str, int] = {}
    started: list[float] = []  # a stack: a closure may call functions of its own

    def instrument(func: object, symbol: str, before: bool, ret: object, *args: object) -> int:
        if before:
            started.append(time.perf_counter())
            return 0  # VMInstrumentReturnKind.NO_OP: run the call as it is
        if sync is not None:
            sync()
        took = time.perf_counter() - started.pop()
        name = str(symbol)
        total[name] = total.get(name, 0.0) + took
        count[name] = count.get(name, 0) + 1
        return 0

    setter = getattr(vm, "set_instrument", None)
    if not callable(setter):
        raise UnsupportedTrial("tvm: this VM has no instrument hook to profile with")
    setter(instrument)
    wall = wall_ms(run, calls)
    return [
        KernelRecord(
            name=name, op_type=name, op_class=classify(name), fused=is_fused(name),
            us_per_inference=seconds * 1e6 / calls, calls_per_inference=count[name] / calls,
        )
        for name, seconds in total.items()
    ], wall  # fmt: skip
