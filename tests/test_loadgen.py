"""The open-loop load generator (issue 43) in real time: latency from the scheduled time (the
coordinated-omission check), the trace's order of events, dynamic batching, several requests in
flight, failed calls, and the closed-loop and offline scenarios. Contract checks only: how close
to its schedule it issues on this machine is ``ngb bench serving``'s to print."""

from __future__ import annotations

import sys
import threading
import time

import numpy as np
import pytest
from ngb.core.base.errors import ConfigError
from ngb.core.records import arrivals
from ngb.core.serving import loadgen, serve_stats


class Stalling:
    """Calls of ``call_s``, except one of ``stall_s`` starting ``stall_at_s`` after the first."""

    def __init__(self, call_s: float, stall_at_s: float, stall_s: float) -> None:
        self.call_s, self.stall_at_s, self.stall_s = call_s, stall_at_s, stall_s
        self.first: float | None = None
        self.stalled = False

    def __call__(self) -> None:
        now = time.perf_counter()
        if self.first is None:
            self.first = now
        if not self.stalled and now - self.first >= self.stall_at_s:
            self.stalled = True
            time.sleep(self.stall_s)
        else:
            time.sleep(self.call_s)


def _coordinated_omission(
    duration_s: float, stall_at_s: float, p50_ms: float = 100.0, qps: float = 100.0
) -> None:
    runner = Stalling(0.005, stall_at_s, 2.0)
    plan = arrivals.schedule(qps, duration_s, seed=0)
    s = serve_stats.summarize(loadgen.run([runner], "server", plan=plan))
    assert runner.stalled
    # every request due during the stall waited for it: 2 s x qps of them, far more than 1 %
    assert s.latency["p99"].value >= 1500.0, s.latency["p99"]
    assert s.latency["p50"].value < min(p50_ms, 0.5 * s.latency["p99"].value)
    # a closed loop over the same calls sees the stall once and ~5 ms everywhere else: one 2 s
    # call among hundreds stays out of its p99. Asked below a quarter of the stall, not near the
    # 5 ms: under five xdist processes on 2 cores a 5 ms sleep's p99 reached 54 ms (2026-12-01)
    closed = Stalling(0.005, stall_at_s / 2, 2.0)
    loop = serve_stats.summarize(loadgen.run([closed], "singlestream", duration_s=duration_s / 2))
    assert closed.stalled
    assert loop.requests > 100, loop.requests  # so one call can stand above the p99
    assert loop.latency["p99"].value < 500.0, loop.latency["p99"]


def test_a_stall_shows_in_the_p99_scaled() -> None:
    """5 ms calls and one 2 s stall at t = 5 s, served at 50 QPS for 10 s (the fast tier's
    version of the 60 s run below). Under `make test`'s load a 5 ms sleep takes longer and the
    backlog after the stall drains slowly over a 10 s run, so the median is only asked to stay
    well below the p99 (the 60 s run asks it under 100 ms). 50 QPS, not the issue's 100: at 100
    the one runner is half busy on a quiet machine, and under five xdist processes on 2 cores
    its calls took long enough that the backlog never drained (p50 1.9 s, p99 2.5 s, 2026-11-30);
    at 50 a call may take four times its 5 ms before that happens. The stall still holds up
    ~100 of the 500 requests, far more than 1 %."""
    _coordinated_omission(10.0, 5.0, p50_ms=float("inf"), qps=50.0)


@pytest.mark.slow
def test_a_stall_shows_in_the_p99() -> None:
    """The issue's run: 5 ms calls, one 2 s stall at t = 30 s, 100 QPS for 60 s: p99 >= 1.5 s."""
    _coordinated_omission(60.0, 30.0)


def test_each_request_is_due_then_issued_then_called_then_answered() -> None:
    plan = arrivals.schedule(200, 2.0, seed=1)
    trace = loadgen.run([lambda: time.sleep(0.001)], "server", plan=plan)
    assert trace.count == plan.count == 400
    assert np.all(trace.issued_ns >= trace.scheduled_ns)
    assert np.all(trace.started_ns >= trace.issued_ns)
    assert np.all(trace.done_ns - trace.started_ns >= 1_000_000)  # each call slept 1 ms
    # the schedule is the plan's, offset to the run's start
    assert np.allclose(trace.scheduled_ns / 1e9, plan.times_s, atol=1e-6)
    # answers in arrival order with one runner
    assert np.all(np.diff(trace.done_ns) > 0)
    assert trace.loadgen_cpu_s >= 0 and trace.issue_s >= plan.times_s[-1]


def test_dynamic_batching_groups_requests_up_to_the_max() -> None:
    calls = []

    def runner() -> None:
        calls.append(time.perf_counter())
        time.sleep(0.02)

    plan = arrivals.schedule(200, 2.0, seed=2)
    batching = loadgen.Batching(max_batch=8, max_queue_delay_s=0.005)
    trace = loadgen.run([runner], "server", plan=plan, batching=batching)
    assert trace.batch.max() <= 8 and trace.batch.mean() > 2
    assert len(calls) < plan.count  # fewer calls than requests
    # a request answered in a batch of k shares its call with k - 1 others
    for size in np.unique(trace.batch):
        same = trace.done_ns[trace.batch == size]
        assert len(same) % size == 0


def test_several_runners_answer_side_by_side() -> None:
    running, most = [0], [0]
    lock = threading.Lock()

    def runner() -> None:
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        time.sleep(0.01)
        with lock:
            running[0] -= 1

    plan = arrivals.schedule(150, 3.0, seed=3)  # 1.5 x what one runner of 10 ms answers
    trace = loadgen.run([runner, runner], "server", plan=plan)
    assert most[0] == 2 and trace.concurrency == 2
    s = serve_stats.summarize(trace)
    assert s.completed_qps > 130  # one runner would answer at most 100/s


def test_failed_calls_are_counted_and_the_run_goes_on() -> None:
    count = [0]

    def runner() -> None:
        count[0] += 1
        if count[0] % 10 == 0:
            raise RuntimeError("bad call")

    plan = arrivals.schedule(200, 1.0, seed=4)
    trace = loadgen.run([runner], "server", plan=plan)
    assert trace.errors == 20 and trace.first_error == "RuntimeError: bad call"
    assert np.all(trace.done_ns > 0)
    assert serve_stats.summarize(trace).verdict == "INVALID"


def test_singlestream_issues_the_next_request_when_the_last_answered() -> None:
    trace = loadgen.run([lambda: time.sleep(0.002)], "singlestream", duration_s=0.5)
    assert trace.count > 50
    assert np.all(trace.issued_ns[1:] >= trace.done_ns[:-1])
    assert np.array_equal(trace.scheduled_ns, trace.issued_ns)  # due when issued: closed loop


def test_multistream_queries_are_answered_whole() -> None:
    trace = loadgen.run(
        [lambda: time.sleep(0.002)] * 2, "multistream", duration_s=0.3, samples_per_query=4
    )
    assert trace.count % 4 == 0
    queries = trace.query.reshape(-1, 4)
    assert np.all(queries == queries[:, :1])
    latency = trace.query_latency_ms()
    assert len(latency) == trace.count // 4
    # the next query starts after the last one's every request answered
    ends = trace.done_ns.reshape(-1, 4).max(axis=1)
    starts = trace.issued_ns.reshape(-1, 4).min(axis=1)
    assert np.all(starts[1:] >= ends[:-1])


def test_offline_queues_everything_at_once() -> None:
    trace = loadgen.run([lambda: time.sleep(0.001)], "offline", count=300)
    assert trace.count == 300
    assert trace.issued_ns.max() < trace.done_ns.min() + 10_000_000  # all queued up front
    assert serve_stats.summarize(trace).completed_qps > 100


def test_warm_up_measures_the_closed_loop_rate() -> None:
    rate = loadgen.warm_up([lambda: time.sleep(0.01)] * 2, 0.3)
    assert 100 < rate < 210  # two runners of 10 ms each


def test_the_switch_interval_is_put_back_and_bad_input_is_one_line() -> None:
    before = sys.getswitchinterval()
    loadgen.run([lambda: None], "offline", count=5)
    assert sys.getswitchinterval() == before
    with pytest.raises(ConfigError, match="scenario"):
        loadgen.run([lambda: None], "bursty")
    with pytest.raises(ConfigError, match="schedule"):
        loadgen.run([lambda: None], "server")
    with pytest.raises(ConfigError, match="max batch"):
        loadgen.Batching(max_batch=0)


def test_the_same_threads_serve_the_warm_up_and_every_run() -> None:
    """``Workers`` keeps one thread per runner for a whole serving: a runtime's per-thread state
    (OpenMP's team, caches) is built once, not at the start of every probe."""
    seen: set[int] = set()

    def runner() -> None:
        seen.add(threading.get_ident())

    with loadgen.Workers([runner, runner]) as workers:
        assert loadgen.warm_up(workers, 0.05) > 0
        loadgen.run(workers, "offline", count=50)
        loadgen.run(workers, "server", plan=arrivals.schedule(200, 0.3, seed=5))
        loadgen.run(workers, "singlestream", duration_s=0.05)
    assert len(seen) == 2 and threading.get_ident() not in seen


class _Pool:
    """What ``loadgen._Watch`` reads of a run: requests put so far, their answer times."""

    def __init__(self, done_ns: list[int], issued: int, now_ns: int) -> None:
        self.done = np.array(done_ns, dtype=np.int64)
        self.issued_count = issued
        self.clock = lambda: now_ns


def test_the_progress_p99_counts_each_answer_once_to_one_percent() -> None:
    """The live p99 comes from a histogram each answer joins once, however many ticks see it:
    a request answered out of order is counted when it is answered, never twice, and the p99
    is the one of every latency so far to within the bins' 1 %."""
    rng = np.random.default_rng(1)
    n = 2000
    scheduled = np.arange(n, dtype=np.int64) * 1_000_000  # one a ms from 0
    latency_ms = rng.lognormal(1.5, 0.6, n)
    done = scheduled + (latency_ms * 1e6).astype(np.int64)
    open_ = np.zeros(n, dtype=bool)
    open_[[10, 500, 1500]] = True  # three still in flight at the first tick
    watch = loadgen._Watch(None)
    first = watch.so_far(_Pool(np.where(open_, 0, done).tolist(), n, 5 * 10**9), scheduled)
    assert first.issued == n and first.answered == n - 3 and watch.cursor == 10
    again = watch.so_far(_Pool(np.where(open_, 0, done).tolist(), n, 6 * 10**9), scheduled)
    assert again.answered == n - 3 and again.p99_ms == first.p99_ms and again.seconds == 6.0
    last = watch.so_far(_Pool(done.tolist(), n, 7 * 10**9), scheduled)  # the three answered
    assert last.answered == n and watch.cursor == n
    true_p99 = np.sort(latency_ms)[int(np.ceil(0.99 * n)) - 1]
    assert last.p99_ms is not None and abs(last.p99_ms / true_p99 - 1) <= 0.021
    empty = loadgen._Watch(None).so_far(_Pool([0, 0], 2, 10**9), scheduled[:2])
    assert (empty.answered, empty.p99_ms) == (0, None)


@pytest.mark.parametrize("scenario", ["server", "singlestream", "offline"])
def test_progress_is_told_from_a_thread_of_its_own(monkeypatch, scenario: str) -> None:
    """The progress callback runs on the watching thread, never the thread that issues the
    requests (its work would delay the next one), with counts that only grow."""
    monkeypatch.setattr(loadgen, "PROGRESS_PERIOD_S", 0.1)
    seen: list[tuple[str, loadgen.SoFar]] = []
    issuer = threading.current_thread().name
    kwargs: dict[str, object] = {
        "server": {"plan": arrivals.schedule(300, 1.0, seed=0)},
        "singlestream": {"duration_s": 0.6},
        "offline": {"count": 400},
    }[scenario]
    loadgen.run(
        [lambda: time.sleep(0.001)], scenario,
        progress=lambda p: seen.append((threading.current_thread().name, p)), **kwargs,  # type: ignore[arg-type]
    )  # fmt: skip
    assert seen, "no progress in a run of several periods"
    assert {name for name, _ in seen} == {"ngb-serve-watch"} and issuer != "ngb-serve-watch"
    counts = [(p.issued, p.answered) for _, p in seen]
    assert counts == sorted(counts) and all(a <= i for i, a in counts)
    answered = [p for _, p in seen if p.answered]
    assert answered and all(p.p99_ms is not None and p.p99_ms >= 1.0 for p in answered)
    assert not any(t.name == "ngb-serve-watch" for t in threading.enumerate())  # joined


def test_a_progress_callback_that_raises_ends_the_display_not_the_run(monkeypatch) -> None:
    monkeypatch.setattr(loadgen, "PROGRESS_PERIOD_S", 0.05)
    calls = []

    def broken(p: loadgen.SoFar) -> None:
        calls.append(p)
        raise RuntimeError("display gone")

    trace = loadgen.run([lambda: None], "server", plan=arrivals.schedule(200, 0.5, seed=0),
                        progress=broken)  # fmt: skip
    assert len(calls) == 1 and trace.count == 100 and trace.errors == 0
