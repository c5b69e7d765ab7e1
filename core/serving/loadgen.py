"""The open-loop load generator next to a compiled model (``ngb serve``, issue 43).

Every other ngb latency comes from calls made one after another on an idle device. A deployed
model receives requests at times nobody chose, so here:

- **server**: the arrival times are made in advance (``ngb.core.records.arrivals``). One issuing
  thread sleeps to each *absolute* deadline and puts the request on a queue; it never waits for an
  answer. N serving threads -- the compiled model's natural concurrency
  (``Compiled.serving_runners``: OpenVINO's infer requests, one synchronous call for the rest), kept
  alive across the warm-up and every run of a serving (``Workers``) -- take requests from the queue
  and call the model. Latency runs from the **scheduled** time to the end of the call, so a stall is
  paid by every request that arrived during it (a closed loop, which sends the next request only
  when the last one answered, sees one slow call and ~5 ms everywhere else; vLLM's ``bench serve``
  read a p99 of 507 ms where 3,330 ms was true). How late the issuing thread put each request on the
  queue (the *issue lag*) is kept apart: it is inside the latency already and says whether the load
  generator kept its schedule.
- **singlestream**: one request at a time, the next as soon as the last answered (LoadGen's
  SingleStream), latency from its issue.
- **multistream**: queries of ``samples_per_query`` requests issued together, the next query as
  soon as the last one's requests all answered (LoadGen's MultiStream); a query's latency ends
  with its last request.
- **offline**: every request queued at time 0; the rate is requests over the time to the last
  answer.

Optional dynamic batching (``Batching``): a worker takes the oldest request, then waits up to
``max_queue_delay_s`` past that request's issue for more, up to ``max_batch``, and answers them
with one call (the model is compiled for ``max_batch``: static shapes, a short batch is padded,
as Triton's dynamic batcher pads a static-shape model).

The issuing thread asks the kernel for exact wake-ups (``prctl(PR_SET_TIMERSLACK, 1)``, Linux):
the default 50 us of timer slack made it wake ~70 us late at the median, which collapsed the
exponential's shortest gaps onto the issuing loop's own cost and failed a Kolmogorov-Smirnov test
of the issued gaps at 500 QPS (D 0.033 over 10,000; ~16 us late with 1 ns of slack). Where
the system permits it (root, CAP_SYS_NICE), the issuing thread also runs in the real-time class
(SCHED_FIFO, priority 1) while it issues: on the shared 2-core VM, with other processes' load
above the core count, ordinary scheduling let it wake 2-3 ms late at its p99. Which of the two
it got is in ``Trace.facts``.

Python threads share one interpreter lock: while a worker runs Python code (torch eager's
``forward`` between operators) the issuing thread, woken by its timer, waits for the lock up to
``sys.getswitchinterval()`` (5 ms by default). A run lowers that to ``SWITCH_INTERVAL_S`` and
restores it. The issuing thread's own CPU time (``time.thread_time``) is reported as the load
generator's CPU, beside the whole process's.

stdlib + numpy: it runs on the device (the agent's rule, ``ARCHITECTURE.md``).
"""

from __future__ import annotations

import contextlib
import ctypes
import math
import os
import queue
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np
from ngb.core.base.errors import ConfigError, one_line
from ngb.core.records.arrivals import Schedule
from ngb.core.records.serve_settings import SCENARIOS, Batching

#: the interpreter's switch interval during a run: how long a woken issuing thread may wait for
#: a worker running Python code to let go of the interpreter lock (the default is 5 ms)
SWITCH_INTERVAL_S = 0.0005
#: seconds between two progress callbacks
PROGRESS_PERIOD_S = 1.0
#: the progress p99's histogram: latencies from 1 us to 1,000 s in bins 1 % wide
_LAT_FLOOR_MS, _LAT_RATIO = 1e-3, 1.01
_LAT_BINS = int(math.ceil(math.log(1e9) / math.log(_LAT_RATIO))) + 1
_PR_SET_TIMERSLACK, _PR_GET_TIMERSLACK = 29, 30  # <linux/prctl.h>

Runner = Callable[[], object]


@dataclass(frozen=True)
class SoFar:
    """A run so far, as its progress callback is given it: requests issued and answered, the
    seconds since its start, and the p99 of the answered requests' latency (ms, from each
    one's scheduled time; to 1 %: a display figure, never the run's statistic), None before
    the first answer."""

    issued: int
    answered: int
    seconds: float
    p99_ms: float | None


#: progress callback, called from a thread of its own (``_Watch``), never the issuing thread
Progress = Callable[[SoFar], None]


@dataclass
class Trace:
    """What one run saw, per request, in ns from its start (int64 arrays, request order).

    ``scheduled_ns``: when the request was due (server: the schedule; closed loops: its issue);
    ``issued_ns``: when the issuing thread queued it; ``started_ns``/``done_ns``: its call;
    ``query``: which query it belongs to (multistream: several requests a query);
    ``batch``: how many requests shared its call."""

    scenario: str
    scheduled_ns: np.ndarray
    issued_ns: np.ndarray
    started_ns: np.ndarray
    done_ns: np.ndarray
    query: np.ndarray
    batch: np.ndarray
    wall_s: float = 0.0  # start to the last answer
    issue_s: float = 0.0  # start to the last issue
    loadgen_cpu_s: float = 0.0  # the issuing thread's CPU time
    process_cpu_s: float = 0.0  # the whole process's CPU time over the run
    concurrency: int = 1
    errors: int = 0
    first_error: str | None = None
    schedule: Schedule | None = None
    facts: dict[str, object] = field(default_factory=dict)

    @property
    def count(self) -> int:
        return int(len(self.scheduled_ns))

    def query_latency_ms(self) -> np.ndarray:
        """Each query's latency (ms): from its scheduled time to its last request's answer."""
        lat = (self.done_ns - self.scheduled_ns) / 1e6
        if self.scenario != "multistream":
            return np.asarray(lat, dtype=float)
        ends = np.zeros(int(self.query.max()) + 1 if len(self.query) else 0)
        np.maximum.at(ends, self.query, lat)
        return ends

    def query_times_s(self) -> np.ndarray:
        """Each query's scheduled time (s), in the order of ``query_latency_ms``."""
        if self.scenario != "multistream":
            return self.scheduled_ns / 1e9
        first = np.full(int(self.query.max()) + 1 if len(self.query) else 0, np.inf)
        np.minimum.at(first, self.query, self.scheduled_ns / 1e9)
        return first


class Workers:
    """The serving threads, one per runner, kept for every run of a serving (warm-up, probes).

    Why long-lived: OpenMP (torch's, ONNX Runtime's builds with it) keeps a thread team per
    *calling* thread, so a fresh serving thread makes its first calls build a new team and warm
    its caches again -- torch eager's resnet18 ran its first calls in a new thread at a tenth of
    its rate, which a thread per probe would have paid at the start of every probe, and which
    the warm-up would have paid for nothing. Each thread runs the tasks it is given, one at a
    time, with its own runner."""

    def __init__(self, runners: Sequence[Runner]) -> None:
        if not runners:
            raise ConfigError("serving needs at least one runner")
        self.runners = list(runners)
        self._inboxes: list[queue.SimpleQueue[Callable[[Runner], None] | None]] = [
            queue.SimpleQueue() for _ in self.runners
        ]
        self._threads = [
            threading.Thread(target=self._serve, args=(i,), name=f"ngb-serve-{i}", daemon=True)
            for i in range(len(self.runners))
        ]
        for t in self._threads:
            t.start()

    def __len__(self) -> int:
        return len(self.runners)

    def _serve(self, i: int) -> None:
        inbox, runner = self._inboxes[i], self.runners[i]
        while (task := inbox.get()) is not None:
            task(runner)

    def each(self, task: Callable[[int, Runner], None]) -> Callable[[], None]:
        """Run ``task(i, runner)`` in every thread; returns the wait for all of them."""
        done = [threading.Event() for _ in self._threads]

        def wrapped(i: int) -> Callable[[Runner], None]:
            def call(runner: Runner) -> None:
                try:
                    task(i, runner)
                finally:
                    done[i].set()

            return call

        for i, inbox in enumerate(self._inboxes):
            inbox.put(wrapped(i))

        def wait() -> None:
            for event in done:
                event.wait()

        return wait

    def close(self) -> None:
        for inbox in self._inboxes:
            inbox.put(None)
        for t in self._threads:
            t.join()

    def __enter__(self) -> Workers:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Pool:
    """One run's requests: a queue the serving threads take them from (see the docstring),
    and what happened to each."""

    def __init__(
        self,
        workers: Workers,
        capacity: int,
        batching: Batching,
        clock: Callable[[], int],
        answered: Callable[[list[int]], None] | None = None,
    ) -> None:
        self.workers = workers
        self.clock = clock
        self.batching = batching
        self.answered = answered
        self.queue: queue.SimpleQueue[int | None] = queue.SimpleQueue()
        self.issued = np.zeros(capacity, dtype=np.int64)
        self.started = np.zeros(capacity, dtype=np.int64)
        self.done = np.zeros(capacity, dtype=np.int64)
        self.batch = np.zeros(capacity, dtype=np.int64)
        self.finished = 0
        self.errors = 0
        self.first_error: str | None = None
        self.issued_count = 0  # requests put so far (in index order): what ``_Watch`` reads
        self._lock = threading.Lock()
        self._wait: Callable[[], None] | None = None

    def start(self) -> None:
        self._wait = self.workers.each(lambda i, runner: self._work(runner))

    def put(self, index: int) -> None:
        self.issued[index] = self.clock()
        self.queue.put(index)
        self.issued_count = index + 1

    def stop(self) -> None:
        """Let the workers finish what is queued, then end this run's task in each."""
        for _ in range(len(self.workers)):
            self.queue.put(None)
        if self._wait is not None:
            self._wait()

    def _take(self) -> list[int] | None:
        first = self.queue.get()
        if first is None:
            return None
        taken = [first]
        most, delay = self.batching.max_batch, self.batching.max_queue_delay_s
        if most > 1:
            deadline = int(self.issued[first]) + int(delay * 1e9)
            while len(taken) < most:
                wait = (deadline - self.clock()) / 1e9
                try:
                    more = self.queue.get(timeout=wait) if wait > 0 else self.queue.get_nowait()
                except queue.Empty:
                    break
                if more is None:  # the end: answer this batch, then stop
                    self.queue.put(None)
                    break
                taken.append(more)
        return taken

    def _work(self, runner: Runner) -> None:
        clock = self.clock
        while (taken := self._take()) is not None:
            began = clock()
            try:
                runner()
            except Exception as exc:  # one failed call is counted, the run goes on
                with self._lock:
                    self.errors += 1
                    if self.first_error is None:
                        self.first_error = one_line(exc)
            ended = clock()
            for i in taken:
                self.started[i] = began
                self.done[i] = ended
                self.batch[i] = len(taken)
            with self._lock:
                self.finished += len(taken)
            if self.answered is not None:
                self.answered(taken)


def _threads(runners: Workers | Sequence[Runner], stack: contextlib.ExitStack) -> Workers:
    """``runners``' serving threads: the caller's, or new ones closed with ``stack``."""
    if isinstance(runners, Workers):
        return runners
    return stack.enter_context(Workers(runners))


def run(
    runners: Workers | Sequence[Runner],
    scenario: str,
    *,
    plan: Schedule | None = None,
    duration_s: float = 10.0,
    samples_per_query: int = 8,
    min_queries: int = 0,
    count: int | None = None,
    batching: Batching | None = None,
    progress: Progress | None = None,
) -> Trace:
    """One run of ``scenario`` on ``runners``' threads (``Workers``, kept by the caller across
    runs; or runners, given threads for this run only); see the module docstring. ``plan``: the
    server's schedule; ``duration_s``/``min_queries``: how long the closed loops run (both must
    be met); ``count``: the offline requests."""
    if scenario not in SCENARIOS:
        raise ConfigError(f"scenario must be one of {', '.join(SCENARIOS)}; got {scenario!r}")
    if scenario == "server" and plan is None:
        raise ConfigError("the server scenario needs an arrival schedule")
    if scenario == "offline" and (count is None or count < 1):
        raise ConfigError("the offline scenario needs a request count")
    per_query = samples_per_query if scenario == "multistream" else 1
    if per_query < 1:
        raise ConfigError(f"samples per query must be at least 1, got {per_query}")
    batching = batching or Batching()
    with contextlib.ExitStack() as stack:
        workers = _threads(runners, stack)
        previous = sys.getswitchinterval()
        sys.setswitchinterval(min(previous, SWITCH_INTERVAL_S))
        stack.callback(sys.setswitchinterval, previous)
        if scenario == "server":
            assert plan is not None
            return _server(workers, plan, batching, progress)
        if scenario == "offline":
            assert count is not None
            return _offline(workers, count, batching, progress)
        return _closed(workers, scenario, per_query, duration_s, min_queries, batching, progress)
    raise AssertionError("unreachable")  # mypy: ExitStack may swallow exceptions


def _trace(
    scenario: str,
    pool: _Pool,
    n: int,
    scheduled: np.ndarray,
    query: np.ndarray,
    start: int,
    cpu: tuple[float, float],
    issue_end: int,
) -> Trace:
    end = int(pool.done[:n].max()) if n else start
    return Trace(
        scenario=scenario,
        scheduled_ns=scheduled[:n] - start,
        issued_ns=pool.issued[:n] - start,
        started_ns=pool.started[:n] - start,
        done_ns=pool.done[:n] - start,
        query=query[:n],
        batch=pool.batch[:n],
        wall_s=(end - start) / 1e9,
        issue_s=(issue_end - start) / 1e9,
        loadgen_cpu_s=cpu[0],
        process_cpu_s=cpu[1],
        concurrency=len(pool.workers),
        errors=pool.errors,
        first_error=pool.first_error,
    )


class _Watch:
    """Calls ``progress`` every ``PROGRESS_PERIOD_S`` from a thread of its own while the run
    goes on (started before the run's clock is, ``begin``), never from the issuing thread,
    whose every microsecond of work would delay the requests due next (the ``ngb serve`` line
    once took the latencies of every answered request there each second). Each answer is added
    once to a histogram of latencies (``_LAT_BINS`` bins 1 % wide): a tick reads only the
    requests since the first one still unanswered, so its cost follows the requests in flight,
    not the run's length.
    A callback that raises is not called again; the run goes on (it is display only)."""

    def __init__(self, progress: Progress | None) -> None:
        self.progress = progress
        self.pool: _Pool | None = None
        self.scheduled = np.zeros(0, dtype=np.int64)
        self.start = 0
        self.cursor = 0  # every request before it is answered and in ``counts``
        self.counts = np.zeros(_LAT_BINS, dtype=np.int64)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> _Watch:
        if self.progress is not None:
            self._thread = threading.Thread(target=self._loop, name="ngb-serve-watch", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def begin(self, pool: _Pool, scheduled: np.ndarray, start: int) -> None:
        """The run's clock started at ``start``; request i of ``pool`` is due at
        ``scheduled[i]``."""
        self.scheduled, self.start = scheduled, start
        self.pool = pool

    def _loop(self) -> None:
        assert self.progress is not None
        while not self._stop.wait(PROGRESS_PERIOD_S):
            pool = self.pool
            if pool is None:
                continue
            try:
                self.progress(self.so_far(pool, self.scheduled))
            except Exception:  # display only: a broken callback ends the display, not the run
                return

    def so_far(self, pool: _Pool, scheduled: np.ndarray) -> SoFar:
        """The run now (see the class docstring)."""
        lo = self.cursor
        n = pool.issued_count
        done = pool.done[lo:n]
        answered = done > 0
        lat_ms = (done[answered] - scheduled[lo:n][answered]) / 1e6
        bins = np.clip(
            np.floor(np.log(np.maximum(lat_ms, _LAT_FLOOR_MS) / _LAT_FLOOR_MS)
                     / math.log(_LAT_RATIO)),
            0, _LAT_BINS - 1,
        ).astype(np.int64)  # fmt: skip
        # the answered prefix is final: into ``counts``, and the cursor past it
        settled = int(np.argmin(answered)) if not answered.all() else len(answered)
        self.counts += np.bincount(bins[:settled], minlength=_LAT_BINS)
        self.cursor = lo + settled
        counts = self.counts + np.bincount(bins[settled:], minlength=_LAT_BINS)
        total = int(counts.sum())
        p99 = None
        if total:
            k = int(np.searchsorted(np.cumsum(counts), math.ceil(0.99 * total)))
            p99 = _LAT_FLOOR_MS * _LAT_RATIO ** (k + 1)  # the bin's upper edge
        seconds = (pool.clock() - self.start) / 1e9
        return SoFar(n, total, seconds, p99)


@contextlib.contextmanager
def _issuing_thread(facts: dict[str, object]) -> Iterator[None]:
    """Exact wake-ups and, where the system allows it, the real-time class for this thread
    while it issues the schedule; both put back after (see the module docstring)."""
    with _exact_wakeups(facts), _realtime(facts):
        yield


@contextlib.contextmanager
def _realtime(facts: dict[str, object]) -> Iterator[None]:
    """SCHED_FIFO at the lowest real-time priority for this thread (Linux, where permitted):
    the issuing thread sleeps almost all the time, and when it wakes no ordinary process on the
    machine runs before it, so a busy machine delays the requests' issue less."""
    setter = getattr(os, "sched_setscheduler", None)
    fifo = getattr(os, "SCHED_FIFO", None)
    if setter is None or fifo is None:
        facts["issuer_policy"] = "default"
        yield
        return
    before = os.sched_getscheduler(0)
    param = os.sched_getparam(0)
    try:
        setter(0, fifo, os.sched_param(1))  # 0: the calling thread
    except OSError:  # not permitted (no CAP_SYS_NICE, an RT budget of 0): as it was
        facts["issuer_policy"] = "default (real-time refused)"
        yield
        return
    facts["issuer_policy"] = "SCHED_FIFO 1"
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            setter(0, before, param)


@contextlib.contextmanager
def _exact_wakeups(facts: dict[str, object]) -> Iterator[None]:
    """This thread's timer slack at 1 ns while the schedule is issued (Linux; elsewhere, or
    where ``prctl`` is refused, the sleeps stay as they are)."""
    prctl = None
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            prctl = ctypes.CDLL(None, use_errno=True).prctl
    before = prctl(_PR_GET_TIMERSLACK, 0, 0, 0, 0) if prctl is not None else -1
    if prctl is None or before < 0 or prctl(_PR_SET_TIMERSLACK, 1, 0, 0, 0) != 0:
        facts["timer_slack_ns"] = before
        yield
        return
    facts["timer_slack_ns"] = 1
    try:
        yield
    finally:
        prctl(_PR_SET_TIMERSLACK, before, 0, 0, 0)


def _server(
    workers: Workers, plan: Schedule, batching: Batching, progress: Progress | None
) -> Trace:
    facts: dict[str, object] = {}
    # the watching thread first: one started from the issuing thread would inherit its
    # real-time class and timer slack
    with _Watch(progress) as watch, _issuing_thread(facts):
        trace = _issue(workers, plan, batching, watch)
    trace.facts.update(facts)
    return trace


def _issue(workers: Workers, plan: Schedule, batching: Batching, watch: _Watch) -> Trace:
    clock = time.perf_counter_ns  # CLOCK_MONOTONIC on Linux: what time.sleep counts in
    n = plan.count
    pool = _Pool(workers, n, batching, clock)
    pool.start()
    offsets = np.round(plan.times_s * 1e9).astype(np.int64)
    cpu0, proc0 = time.thread_time(), time.process_time()
    start = clock()
    scheduled = offsets + start
    watch.begin(pool, scheduled, start)
    sleep, put = time.sleep, pool.put
    for i in range(n):
        due = int(scheduled[i])
        while (wait := due - clock()) > 0:  # an absolute deadline: lateness never accumulates
            sleep(wait / 1e9)
        put(i)
    issue_end = clock()
    loadgen_cpu = time.thread_time() - cpu0  # the issuing thread alone, before it waits
    pool.stop()
    trace = _trace(
        "server", pool, n, scheduled, np.arange(n), start,
        (loadgen_cpu, time.process_time() - proc0), issue_end,
    )  # fmt: skip
    trace.schedule = plan
    return trace


def _offline(workers: Workers, count: int, batching: Batching, progress: Progress | None) -> Trace:
    clock = time.perf_counter_ns
    pool = _Pool(workers, count, batching, clock)
    with _Watch(progress) as watch:
        cpu0, proc0 = time.thread_time(), time.process_time()
        start = clock()
        scheduled = np.full(count, start, dtype=np.int64)
        for i in range(count):  # all queued before the first call: nothing waits on an issue
            pool.put(i)
        issue_end = clock()
        loadgen_cpu = time.thread_time() - cpu0
        watch.begin(pool, scheduled, start)
        pool.start()
        while pool.finished < count:
            time.sleep(0.05)
        pool.stop()
    return _trace(
        "offline", pool, count, scheduled, np.zeros(count, dtype=np.int64), start,
        (loadgen_cpu, time.process_time() - proc0), issue_end,
    )  # fmt: skip


def _closed(
    workers: Workers,
    scenario: str,
    per_query: int,
    duration_s: float,
    min_queries: int,
    batching: Batching,
    progress: Progress | None,
) -> Trace:
    """singlestream / multistream: the next query when the last one answered."""
    clock = time.perf_counter_ns
    # room for a request every 50 us (capped: a closed loop on a real model is far slower); the
    # run ends early, and says so in ``issue_s``, if it ever fills
    capacity = (min_queries + max(1024, min(int(duration_s * 20_000), 2_000_000))) * per_query
    left = [0]
    answered = threading.Event()
    guard = threading.Lock()

    def on_answer(taken: list[int]) -> None:
        with guard:
            left[0] -= len(taken)
            if left[0] <= 0:
                answered.set()

    pool = _Pool(workers, capacity, batching, clock, on_answer)
    pool.start()
    query = np.zeros(capacity, dtype=np.int64)
    with _Watch(progress) as watch:
        cpu0, proc0 = time.thread_time(), time.process_time()
        loadgen_cpu = 0.0
        start = clock()
        end_ns = start + int(duration_s * 1e9)
        watch.begin(pool, pool.issued, start)  # a closed loop's request is due when it is issued
        n = q = 0
        while (clock() < end_ns or q < min_queries) and n + per_query <= capacity:
            answered.clear()
            with guard:
                left[0] = per_query
            for _ in range(per_query):
                query[n] = q
                pool.put(n)
                n += 1
            q += 1
            cpu1 = time.thread_time()
            answered.wait()
            loadgen_cpu -= time.thread_time() - cpu1  # waiting is not the load generator's work
        issue_end = clock()
        loadgen_cpu += time.thread_time() - cpu0
        pool.stop()
    scheduled = pool.issued.copy()  # a closed loop's request is due when it is issued
    return _trace(
        scenario, pool, n, scheduled, query, start,
        (loadgen_cpu, time.process_time() - proc0), issue_end,
    )  # fmt: skip


def warm_up(runners: Workers | Sequence[Runner], seconds: float, min_calls: int = 2) -> float:
    """Call every runner, all at once, for ``seconds`` (each at least ``min_calls`` times) on
    its serving thread; returns the calls answered per second with every runner busy over the
    warm-up's second half (the first calls pay for kernel selection and caches): the
    closed-loop capacity a peak search starts from."""
    with contextlib.ExitStack() as stack:
        workers = _threads(runners, stack)
        return _warm_up(workers, seconds, min_calls)
    raise AssertionError("unreachable")  # mypy: ExitStack may swallow exceptions


def _warm_up(workers: Workers, seconds: float, min_calls: int) -> float:
    began = time.perf_counter()
    half, stop = began + seconds / 2, began + seconds
    # Each runner's rate is read between its own answers after the midpoint: counting every
    # answer after the midpoint over (end - midpoint) would credit the call that straddles it in
    # full, up to one call per runner too many (2 runners of 10 ms read 211/s, not 200, in CI).
    first_late = [0.0] * len(workers)  # the first answer after the midpoint
    last = [0.0] * len(workers)
    late = [0] * len(workers)  # answers after that first one
    counts = [0] * len(workers)
    failed: list[BaseException] = []

    def loop(i: int, runner: Runner) -> None:
        try:
            while counts[i] < min_calls or time.perf_counter() < stop:
                runner()
                counts[i] += 1
                now = time.perf_counter()
                if now > half:
                    if first_late[i]:
                        late[i] += 1
                    else:
                        first_late[i] = now
                    last[i] = now
        except Exception as exc:  # raised again in the caller's thread
            failed.append(exc)

    workers.each(loop)()
    if failed:
        raise failed[0]
    ended = time.perf_counter()
    if ended <= began:
        return float("nan")
    # a runner with fewer than two answers after the midpoint (calls of over half the warm-up)
    # is read over the whole warm-up, first calls included: the only figure it gives
    return sum(
        n / (b - a) if n and b > a else count / (ended - began)
        for n, a, b, count in zip(late, first_late, last, counts, strict=True)
    )
