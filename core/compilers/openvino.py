"""``openvino``: the shared ONNX export compiled by OpenVINO, driven the way ``benchmark_app`` is.

Under the THROUGHPUT hint OpenVINO splits the CPU into several streams and expects one infer
request in flight per stream; a single synchronous request leaves most streams idle and
under-reports throughput by ~45 % on a 2-core CPU. So ``timed_loop`` drives an ``AsyncInferQueue``
(sized by the compiled model's OPTIMAL_NUMBER_OF_INFER_REQUESTS, or ``nireq``), in steady state
as ``benchmark_app`` does: the queue is filled once (by the first timed loop, i.e. the warm-up)
and never drained between timed loops. Each loop counts the requests that *complete inside its
window* (a request's completion = our start stamp + OpenVINO's own latency for it), so a window
neither waits for a drain (with 16 requests of ~80 ms in flight, ``wait_all`` after each 0.5 s
repetition cost ~10 % on a 16-core CPU) nor starts from an idle queue. Windows tile time: a
loop called straight after the previous one (a gap under a tenth of a request's latency, as
between repetitions) opens where that one closed, and counts the completions of the gap. Why:
a window closes at the first completion after its minimum duration, so its last interval between
completions is size-biased (the deadline falls into long intervals more often). A window that
opened afresh at the next completion -- right after the previous close, i.e. at the short end
of that pattern -- then held one long interval too many: with 2 streams whose completions came
3 ms and 138 ms apart, resnet18 b8 read ~4 % below the completions per wall second of the same
period (and below ``benchmark_app``). Tiled windows give each interval to exactly one window.
After a longer gap (the quiet check before the first repetition, a drain) the queue may have run
idle, so the window opens afresh at a completion: opened at an arbitrary instant instead, a window
closing on its k-th completion would overstate throughput by about k / (k - 1/2) when requests are
long (resnet18 b8 on 2 cores: ~0.4 s each). ``close`` drains.
Under the LATENCY hint one synchronous request is the vendor's own protocol, so the base loop is
kept.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ngb.core.base.errors import CompilerUnavailable, ConfigError, UnsupportedTrial
from ngb.core.compilers.base import (
    CompileContext,
    Compiled,
    Compiler,
    CompilerConfig,
    LoopResult,
    Style,
    choice,
)
from ngb.core.compilers.onnx_export import EXPORT_UNSUPPORTED_ERRORS
from ngb.core.models.precision import from_openvino, openvino_hint

if TYPE_CHECKING:
    from ngb.core.compilers.profiling import KernelRecord
    from ngb.core.models.model_types import Array, Example, Model
    from ngb.core.records.trial_extra import CompilerFacts
    from openvino import AsyncInferQueue, CompiledModel, Core, InferRequest
    from openvino import Model as OvModel

HINTS = ("THROUGHPUT", "LATENCY")
DEVICES = ("CPU", "GPU", "AUTO")
PRECISIONS = ("f32", "bf16", "f16")


def _check_positive_int(name: str, value: object) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{name} must be a positive integer or omitted; got {value!r}")


@dataclass(frozen=True)
class OpenVinoConfig(CompilerConfig):
    hint: str = "THROUGHPUT"  # PERFORMANCE_HINT
    nireq: int | None = None  # infer requests in flight; None = OPTIMAL_NUMBER_OF_INFER_REQUESTS
    streams: int | None = None  # NUM_STREAMS; None = what the hint picks
    device: str = "CPU"  # OpenVINO device (GPU = Intel GPU, not an NVIDIA one)
    inference_precision: str | None = None  # None = the device default (bf16 on AMX/AVX512-BF16)

    def __post_init__(self) -> None:
        choice("hint", self.hint, HINTS)
        choice("device", self.device, DEVICES)
        if self.inference_precision is not None:
            choice("inference_precision", self.inference_precision, PRECISIONS)
        _check_positive_int("nireq", self.nireq)
        _check_positive_int("streams", self.streams)


class _OvCompiled(Compiled):
    def __init__(
        self, compiled_model: CompiledModel, arrays: list[Array], hint: str, nireq: int
    ) -> None:
        super().__init__()
        import openvino as ov

        self._model = compiled_model
        self._arrays = arrays  # the example batch; the tensors below share its memory
        self._inputs = [ov.Tensor(a, shared_memory=True) for a in arrays]
        self._hint = hint
        self._nireq = nireq
        self._request = compiled_model.create_infer_request()
        self._bind(self._request)
        self._queue: AsyncInferQueue | None = None
        self._requests: list[InferRequest] = []
        # perf_counter_ns when each queue request was last started; None = idle, not yet counted
        self._started: list[int | None] = []
        # Where the last window closed, and the gap within which the next one continues from it
        # (a tenth of that window's median latency); None = open the next window afresh.
        self._closed: int | None = None
        self._tile_ns = 0

    def _bind(self, request: InferRequest) -> None:
        for i, tensor in enumerate(self._inputs):
            request.set_input_tensor(i, tensor)

    def run(self) -> object:
        """One synchronous request. The array returned is the request's output buffer."""
        self._request.infer()
        return self._request.get_output_tensor(0).data

    def output_numpy(self) -> Array:
        import numpy as np

        return np.array(self.run(), copy=True)

    def feed(self, arrays: Sequence[Array]) -> None:
        import numpy as np

        self.drain()  # no queued request may read the buffers while they change
        for kept, array in zip(self._arrays, arrays, strict=True):
            np.copyto(kept, array, casting="same_kind")  # the tensors share this memory
        self._bind(self._request)

    def serving_runners(self, concurrency: int | None = None) -> list[Callable[[], object]]:
        """One infer request per runner, each bound to the example batch, ``nireq`` of them
        by default (the THROUGHPUT hint's streams each want one in flight; one under LATENCY):
        a synchronous ``infer`` on its own request lets go of the interpreter lock, so the
        serving threads run the requests side by side as ``benchmark_app``'s queue does."""
        count = concurrency or (self._nireq if self._hint == "THROUGHPUT" else 1)
        if count < 1:
            raise ConfigError(f"concurrency must be at least 1, got {count}")
        runners: list[Callable[[], object]] = []
        for _ in range(count):
            request = self._model.create_infer_request()
            self._bind(request)
            # the outputs' buffers handed back as they are: a copy per call is not the model's
            runners.append(functools.partial(request.infer, share_outputs=True))
        self.extra["serving_requests"] = count
        return runners

    def _infer_queue(self) -> AsyncInferQueue:
        """Build the queue once, bind every request, and run each once (first-run costs)."""
        if self._queue is None:
            import openvino as ov

            queue = ov.AsyncInferQueue(self._model, self._nireq)
            for i in range(len(queue)):
                self._bind(queue[i])
            for _ in range(len(queue)):
                queue.start_async()
            queue.wait_all()
            self._queue = queue
            self._requests = [queue[i] for i in range(len(queue))]
            self._started = [None] * len(queue)
        return self._queue

    def timed_loop(self, min_iters: int, min_duration_s: float) -> LoopResult:
        if self._hint != "THROUGHPUT":
            return super().timed_loop(min_iters, min_duration_s)
        queue = self._infer_queue()
        requests, started = self._requests, self._started
        # No Python completion callback: OpenVINO's own callback stamps each request's start and
        # end (``request.latency``) without the GIL, so completions never wait on this thread
        # (and tearing the queue down cannot deadlock on a pending Python callback).
        latencies: list[int] = []
        busy_ns = 0  # request-time spent inside the window, summed over requests
        clock = time.perf_counter_ns
        min_ns = int(min_duration_s * 1e9)
        called = now = clock()
        # Straight after the previous window: continue from its close (the windows tile time);
        # otherwise the window opens at the first completion seen in this call.
        tiled = self._closed is not None and called - self._closed <= self._tile_ns
        opened = self._closed if tiled else None
        # Completions up to here belong to the previous window (tiled) or to no window (afresh).
        before = self._closed if tiled else called
        while opened is None or len(latencies) < min_iters or now - opened < min_ns:
            handle = queue.get_idle_request_id()  # blocks until one is free: the queue stays full
            now = clock()
            began = started[handle]
            if began is not None:  # it completed since it was started
                latency = int(requests[handle].latency * 1e6)  # ms -> ns
                if began + latency <= before:
                    pass  # finished before this window: the previous one counted it, or neither
                elif opened is None:
                    opened = now
                else:
                    latencies.append(latency)
                    busy_ns += min(latency, max(began + latency - opened, 0))
            queue.start_async()  # takes that same idle request; inputs are bound already
            started[handle] = clock()
        assert opened is not None
        # Requests that had completed by ``now`` but were not looked at yet (several can finish
        # together) belong to this window too; count them and keep the queue full.
        while queue.is_ready():
            handle = queue.get_idle_request_id()  # does not block: one is idle
            began = started[handle]
            latency = int(requests[handle].latency * 1e6)
            if began is None or began + latency > now:
                break  # finished after the window closed: the next window counts it if tiled
            latencies.append(latency)
            busy_ns += min(latency, max(began + latency - opened, 0))
            queue.start_async()
            started[handle] = clock()
        elapsed = now - opened  # from the window's opening to the last completion counted
        self._closed = now
        self._tile_ns = int(sorted(latencies)[len(latencies) // 2] / 10) if latencies else 0
        busy_ns += sum(now - max(b, opened) for b in started if b is not None and b < now)
        # Requests in flight on average over the window: ~nireq when the queue is kept full, 1.0
        # for one synchronous request. Recorded as evidence of how the runtime was driven.
        self.extra["mean_in_flight"] = round(busy_ns / elapsed, 3) if elapsed else 0.0
        self.extra["driver"] = "steady-state async queue (filled once, drained on close)"
        self.extra["requests_in_flight"] = len(requests)
        return LoopResult(iters=len(latencies), elapsed_s=elapsed / 1e9, latencies_ns=latencies)

    def drain(self) -> None:
        """Wait for the queue's requests; the next timed loop refills it (from idle)."""
        if self._queue is not None:
            self._queue.wait_all()
            self._started = [None] * len(self._started)
            self._closed = None  # the queue ran idle: the next window opens afresh

    def close(self) -> None:
        self.drain()
        self._queue = None
        self._request = None
        self._model = None


class _OvProfiled(_OvCompiled):
    """A profile build (``PERF_COUNT``, one stream: ``_one_stream``). Its counters are a running
    mean over every call its stream has served, so it counts its synchronous calls; only a
    profile build pays for the count, never a timed call."""

    def __init__(
        self, compiled_model: CompiledModel, arrays: list[Array], hint: str, nireq: int
    ) -> None:
        super().__init__(compiled_model, arrays, hint, nireq)
        self._calls = 0

    def run(self) -> object:
        self._calls += 1
        return super().run()

    def profile_records(self, calls: int) -> tuple[list[KernelRecord], float, str]:
        """``calls`` synchronous requests: each node's time per call from the counters read
        before and after them (``openvino_records``); the wall ms per call (the counters'
        read-out left out); the tool. The counters are a running mean over every call the
        stream's graph has served, whichever request made it, so the calls are counted here
        and the model must have served no others (no queue, one stream)."""
        from ngb.core.compilers.profile_graphs import openvino_origins
        from ngb.core.compilers.profiling import openvino_records

        if self._queue is not None or _streams(self._model) != 1:
            raise UnsupportedTrial(
                "OpenVINO's counters are read from a profile build of one stream whose every "
                "call is counted; this model has several streams or served queued requests"
            )
        if self._calls == 0:
            self.run()  # the first call (buffers, first-run costs) stays out of the difference
        served = self._calls
        before = self._request.get_profiling_info()
        spent = 0.0
        for _ in range(calls):
            start = time.perf_counter()
            self._request.infer()
            spent += time.perf_counter() - start
        self._calls += calls
        after = self._request.get_profiling_info()
        origins = openvino_origins(self._model.get_runtime_model())
        records = openvino_records(before, after, served, calls, origins)
        return records, spent * 1000.0 / calls, "openvino PERF_COUNT"


class OpenVinoCompiler(Compiler[OpenVinoConfig]):
    name = "openvino"
    description = "OpenVINO (THROUGHPUT/LATENCY hint, async infer requests)"
    devices = ("cpu",)
    requires = ("openvino", "onnx", "torch")
    #: OpConversionFailure: OpenVINO's ONNX frontend has no conversion for an op
    unsupported_errors = (*EXPORT_UNSUPPORTED_ERRORS, "OpConversionFailure")
    #: INFERENCE_PRECISION_HINT f32 / bf16 / f16; a CPU without bf16 or f16 kernels refuses the
    #: trial after compile (the hint read back differs), it never runs another precision silently
    precisions = {"cpu": ("default", "fp32", "bf16", "fp16")}
    version_packages = {"openvino": ("openvino",)}
    sources = ("torch", "onnx")  # a user's ONNX file is read as is
    style = Style((0, 158, 115), "▲", "△")  # Okabe-Ito bluish green
    short_name = "OV"
    profiler = "rebuild"  # its counters are a compile option (``PERF_COUNT``)
    version_libraries = ("openvino",)

    def compile(self, model: Model, example: Example, ctx: CompileContext) -> Compiled:
        import openvino as ov
        from ngb.core.compilers.onnx_export import example_tuple, export_onnx

        cfg = self.config
        if ctx.device != "cpu":
            raise ConfigError(f"openvino runs on the host CPU here; got device {ctx.device!r}")
        core = ov.Core()
        if cfg.device != "AUTO" and cfg.device not in core.available_devices:
            raise CompilerUnavailable(
                f"OpenVINO device {cfg.device} not present "
                f"(available: {', '.join(core.available_devices)})"
            )
        with ctx.phase("export"):
            path = export_onnx(model, example, ctx.workdir / "model.onnx")
        asked = _precision_hint(ctx.precision, cfg.inference_precision)
        with ctx.phase("compile"):
            properties: dict[str, str | int] = {"PERFORMANCE_HINT": cfg.hint}
            if cfg.streams:
                properties["NUM_STREAMS"] = cfg.streams
            if asked:
                properties["INFERENCE_PRECISION_HINT"] = asked
            if ctx.threads:
                properties["INFERENCE_NUM_THREADS"] = ctx.threads
            if (
                ctx.profile
            ):  # a profile pass (ngb.core.compilers.profiling): counters, never when timed
                properties["PERF_COUNT"] = "YES"
            read = core.read_model(str(path))
            compiled_model = core.compile_model(read, cfg.device, properties)
            if ctx.profile:
                compiled_model = _one_stream(core, read, cfg.device, properties, compiled_model)
            optimal = int(compiled_model.get_property("OPTIMAL_NUMBER_OF_INFER_REQUESTS"))
            nireq = cfg.nireq or optimal
            arrays = [t.detach().cpu().contiguous().numpy() for t in example_tuple(example)]
            built = _OvProfiled if ctx.profile else _OvCompiled
            compiled = built(compiled_model, arrays, cfg.hint, nireq)
        facts = _properties(compiled_model)
        ran = facts.get("inference_precision")
        if asked and ran != asked:
            compiled.close()
            raise UnsupportedTrial(
                f"OpenVINO {cfg.device} compiled {ran} when {asked} was asked "
                "(no such kernels on this device)"
            )
        compiled.precision = from_openvino(str(ran)) if ran else None
        compiled.precision_flags = {"INFERENCE_PRECISION_HINT": ran, "asked": asked}
        compiled.extra.update(
            {
                "hint": cfg.hint,
                "device": cfg.device,
                "nireq": nireq if cfg.hint == "THROUGHPUT" else 1,
                "optimal_nireq": optimal,
                "onnx_path": str(path),
            }
        )
        compiled.extra.update(facts)
        return compiled

    def versions(self) -> dict[str, str]:
        """The runtime's own build string (more precise than the wheel's version)."""
        import openvino as ov

        return {"openvino": ov.get_version()}


def _one_stream(
    core: Core,
    read: OvModel,
    device: str,
    properties: dict[str, str | int],
    compiled: CompiledModel,
) -> CompiledModel:
    """A profile build of one stream with the threads one stream of ``compiled`` has: a
    synchronous call runs on one stream either way, so the calls time alike, but the counters
    belong to a stream's graph (a running mean over the calls it served) and synchronous calls
    take the streams in turn, so only with one stream does a count of the calls date them."""
    streams = _streams(compiled)
    if streams is None or streams <= 1:
        return compiled
    threads = max(1, int(compiled.get_property("INFERENCE_NUM_THREADS")) // streams)
    return core.compile_model(
        read, device, {**properties, "NUM_STREAMS": 1, "INFERENCE_NUM_THREADS": threads}
    )


def _streams(compiled: CompiledModel) -> int | None:
    """The compiled model's number of streams; None where the device does not say (AUTO)."""
    try:
        return int(compiled.get_property("NUM_STREAMS"))
    except (RuntimeError, TypeError, ValueError):
        return None


def _precision_hint(precision: str, option: str | None) -> str | None:
    """The INFERENCE_PRECISION_HINT to ask for: the trial's precision, else the option, else none.

    Both given and different is a contradiction the operator must resolve.
    """
    hint = openvino_hint(precision)
    if hint and option and option != hint:
        raise ConfigError(
            f"precision {precision} contradicts the openvino option inference_precision={option}"
        )
    return hint or option


def _properties(compiled_model: CompiledModel) -> CompilerFacts:
    """What OpenVINO actually chose (streams, threads, precision), for the record; a property the
    device does not report is left out. Each key is written by name, so mypy checks it."""
    facts: CompilerFacts = {}
    if (streams := _property(compiled_model, "NUM_STREAMS")) is not None:
        facts["num_streams"] = streams
    if (threads := _property(compiled_model, "INFERENCE_NUM_THREADS")) is not None:
        facts["inference_num_threads"] = threads
    if (precision := _property(compiled_model, "INFERENCE_PRECISION_HINT")) is not None:
        facts["inference_precision"] = precision
    return facts


def _property(compiled_model: CompiledModel, name: str) -> int | float | str | None:
    """One property as read back (None: the device does not report it)."""
    try:
        value = compiled_model.get_property(name)
    except RuntimeError:  # not every device reports every property
        return None
    if hasattr(value, "to_string"):  # ov.Type, e.g. bf16
        value = value.to_string()
    return value if isinstance(value, int | float) else str(value)
