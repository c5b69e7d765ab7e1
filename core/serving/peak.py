"""The peak search: the most queries per second a latency budget allows, with an interval.

``ngb serve --find-peak --p99-ms X`` asks for QPS*, the offered rate at which the server's p99
reaches X. Each *probe* is one server-scenario run at a fixed rate (``ngb.core.serving.loadgen``, or
a simulated server, ``ngb.core.serving.serve_sim``), summed up with its p99 interval and the share
of requests over X (``ngb.core.serving.serve_stats``). A probe *meets* X when its p99 upper bound is
within X, *misses* it when its lower bound is above, and is *undecided* otherwise.

1. **Bracket** on log-QPS with short probes (``bracket_share`` of ``probe_s``, but at least
   ``BRACKET_REQUESTS`` requests): from the start rate, double after a probe whose p99 came out
   within X, halve after one above it, until two rates straddle X.
2. **Bisect** on log-QPS (the geometric midpoint of the straddling rates) until they are within
   ``BISECT_UNTIL`` of each other.
3. **Boundary**: probes of ``probe_s`` alternately ``SPREAD`` below and above the current
   estimate (the probes near the boundary are the repeated ones), until the interval is within
   ``target`` (after at least ``BOUNDARY_MIN`` of them) or ``max_probes`` are spent. Where the
   interval is still too wide, the next probe is longer: the width falls as one over the root of
   the boundary's seconds, so it asks for what the probes left need (``MARGIN`` more), up to
   ``max_probe_s``.

The estimate pools every probe near the boundary instead of trusting the last one. Why: under
load, late requests come in bursts (a queue that built up answers several late requests in a
row), so the share over X of one 60 s probe at the boundary of an M/M/1 queue is +-55 % (ten
times the binomial variance) and one probe places the crossing only within ~+-20 %. Pooled: the
log of the share over X is close to linear in QPS over the +-40 % around the crossing (exactly
linear for M/M/1, where it is -(mu - lambda) X), so a Poisson regression with a log link
through the probes' (QPS, requests over X, requests) -- counts, never the log of a noisy share,
whose bias moved the crossing by ~3 % -- crosses log(1 - q) at QPS*. Its interval is Fieller's
(the rates where the line's value is within z standard errors of log(1 - q); a slope that is not
clearly positive gives no bounded interval, and the search says so). The variance is a sandwich:
the regression's own weights outside, and in the middle each probe's own batch-means variance
(``serve_stats.exceedance``: the run cut into stretches of time), because the bursts grow with
the load (the variance over the binomial's is ~8 at 0.9 QPS* and ~14 at 1.1 QPS* for M/M/1), so
one pooled factor made the interval a third too wide.

Checked in virtual time (``tests/test_peak.py``, ``ngb bench serving``): against M/M/1 with
mu = 100/s and p99 <= 100 ms (QPS* = 53.95), the interval holds the truth in 93-96 of 100
searches with a median half-width of 4.4 % (300 s probes; 200 s: 4.7 %); against M/D/1 and
log-normal service, 57-59 of 60.

When no line can be fitted (fewer than two rates near the boundary, no late request, a slope not
clearly positive, a Fieller interval reaching down to 0 QPS), the interval is the bracket: the
highest rate a probe *verified* below the lowest that missed X. A probe verifies its rate when
it is VALID (``serve_stats``: the rate achieved, the issue lag small, the p99 claimed) and its p99
upper bound is within X. Where no probe verified a rate there is no lower bound at all: ``low``
is None and every surface says so ("QPS* below 7.8 ...: no VALID probe met p99 <= 30 ms, down
to the lowest probe at 5.1 QPS"), never a bracket from 0, which would claim a rate nothing
showed to meet X; ``qps`` is then only the sample p99s' estimate. Where no probe missed X,
``high`` is infinite. Also reported: the highest rate verified, a conservative number that
needs no model of the curve.

Pure functions; the caller's ``probe`` runs the servings (real or simulated).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from statistics import NormalDist

from ngb.core.base.errors import ConfigError
from ngb.core.serving.serve_stats import VALID, Summary

MEETS, MISSES, UNDECIDED = "meets", "misses", "undecided"
#: bisect while the bracket's high / low is above this
BISECT_UNTIL = 1.25
#: probes whose share over the limit is within this factor of 1 - q feed the line
SHARE_RANGE = 20.0
#: ... and whose rate is within this factor of the current estimate
RATE_RANGE = 1.4
#: boundary probes go this share below and above the estimate, alternately
SPREAD = 0.1
#: how much more time than the square law says a longer boundary probe asks for
MARGIN = 1.3
#: full-length probes kept for the boundary
BOUNDARY_MIN = 3
#: requests a short probe holds at least (a p99 is claimed from 368)
BRACKET_REQUESTS = 1000

#: probe(qps, duration_s, index) -> the run summed up against the limit
ProbeFn = Callable[[float, float, int], Summary]


@dataclass(frozen=True)
class Probe:
    index: int
    qps: float
    duration_s: float
    phase: str  # bracket | bisect | boundary
    summary: Summary

    @property
    def verified(self) -> bool:
        """The probe shows its rate meets the limit: VALID, and its p99 upper bound within."""
        return self.outcome == MEETS and self.summary.verdict == VALID

    @property
    def outcome(self) -> str:
        limit = self.summary.limit_ms
        p = self.summary.latency[self.summary.claimed or "p99"]
        if limit is None:
            return UNDECIDED
        if p.high is not None and p.high <= limit:
            return MEETS
        if p.low is not None and p.low > limit:
            return MISSES
        return UNDECIDED

    def to_dict(self) -> dict[str, object]:
        return {
            "index": self.index, "qps": self.qps, "duration_s": self.duration_s,
            "phase": self.phase, "outcome": self.outcome, "summary": self.summary.to_dict(),
        }  # fmt: skip


@dataclass
class Peak:
    """QPS* with its interval, how it was found, and every probe.

    ``low`` is None where no probe verified a rate below ``high`` (no lower bound: see the
    module docstring), ``high`` infinite where no probe missed the limit."""

    limit_ms: float
    q: float
    qps: float
    low: float | None
    high: float
    method: str  # "line" (pooled fit) or "bracket"
    verified_qps: float | None
    probes: list[Probe] = field(default_factory=list)
    level: float = 0.95

    @property
    def half_width(self) -> float:
        """Half the interval's width relative to QPS*; NaN without a lower bound."""
        if self.low is None or not self.qps > 0:
            return math.nan
        return (self.high - self.low) / 2 / self.qps

    @property
    def lowest_qps(self) -> float | None:
        """The lowest rate probed."""
        return min((p.qps for p in self.probes), default=None)

    def text(self) -> str:
        """QPS* and its interval in one phrase (``star_text``)."""
        return star_text(self.qps, self.low, self.high, self.limit_ms, self.q, self.lowest_qps)

    def to_dict(self) -> dict[str, object]:
        return {
            "limit_ms": self.limit_ms, "q": self.q, "qps": self.qps, "low": self.low,
            "high": self.high, "method": self.method, "verified_qps": self.verified_qps,
            "level": self.level, "probes": [p.to_dict() for p in self.probes],
        }  # fmt: skip

    def describe(self) -> str:
        """The line ``ngb serve`` prints: QPS* [interval], how it was found, the rate verified."""
        verified = f"{self.verified_qps:.4g}" if self.verified_qps is not None else "none"
        how = f"{self.level * 100:g} % interval, {self.method}, {len(self.probes)} probes"
        return (
            f"{self.text()} ({how}); highest rate verified (VALID, p{self.q * 100:g} upper "
            f"bound within {self.limit_ms:g} ms): {verified}"
        )


def star_text(
    qps: float,
    low: float | None,
    high: float | None,
    limit_ms: float,
    q: float = 0.99,
    lowest: float | None = None,
    *,
    value_shown: bool = False,
) -> str:
    """QPS* and its interval as every surface prints it, from a ``Peak`` or a stored
    ``serving_peaks`` row (``high`` None or infinite: no upper bound; ``low`` None or NaN: no
    probe verified a rate, so no lower bound, said in words rather than as a bracket from 0 --
    the 0 a row stored before that means the same; ``lowest``: the lowest rate probed, where
    known). ``value_shown``: the caller prints ``qps`` itself just before (a report's cell), so
    the words leave out "QPS*" and the estimate and go on from it ("6.9 below 7.8 (no lower
    bound): no VALID probe met p99 <= 30 ms")."""
    bound = f"p{q * 100:g} <= {limit_ms:g} ms"
    has_low = low is not None and math.isfinite(low) and low > 0
    has_high = high is not None and math.isfinite(high)
    head = "" if value_shown else f"QPS* {qps:.4g} "
    if has_low and has_high:
        return f"{head}[{low:.4g}, {high:.4g}] for {bound}"
    if has_low:
        return f"{head}[{low:.4g}, unbounded] for {bound}: no probe missed it"
    # no VALID probe's p99 upper bound was within the limit: nothing shows a rate that meets it
    down = f", down to the lowest probe at {lowest:.4g} QPS" if lowest is not None else ""
    named = "" if value_shown else "QPS* "
    if has_high:
        assert high is not None
        # the sample p99s' estimate, where it says more than the bound
        guess = f"estimate {qps:.4g}, " if qps < high and not value_shown else ""
        return f"{named}below {high:.4g} ({guess}no lower bound): no VALID probe met {bound}{down}"
    guess = "" if value_shown else f" (estimate {qps:.4g})"
    return f"{named}not bracketed{guess}: no VALID probe met {bound}, none missed it{down}"


@dataclass(frozen=True)
class _Line:
    qps: float
    low: float
    high: float


def _near(probes: list[Probe], centre: float, q: float) -> list[Probe]:
    """The probes that feed the line: not overloaded (share over the limit within
    ``SHARE_RANGE`` of 1 - q; none over is fine) and within ``RATE_RANGE`` of the estimate."""
    top = (1 - q) * SHARE_RANGE
    return [
        p
        for p in probes
        if p.summary.exceed is not None
        and p.summary.exceed.n > 0
        and p.summary.exceed.share <= top
        and centre / RATE_RANGE <= p.qps <= centre * RATE_RANGE
    ]


def _dispersion(probes: list[Probe]) -> float:
    """Batch-means variance over the binomial's, pooled over probes (weighted by requests over
    the limit); at least 1."""
    num = den = 0.0
    for p in probes:
        ex = p.summary.exceed
        if ex is None or ex.over < 2 or not math.isfinite(ex.se):
            continue
        binomial = ex.share * (1 - ex.share) / ex.n
        num += ex.over * (ex.se**2 / binomial)
        den += ex.over
    return max(1.0, num / den) if den else 1.0


@dataclass(frozen=True)
class _Fit:
    """log E[over / n] = a + b * (qps - xbar) and the variances of a and b."""

    a: float
    b: float
    xbar: float
    va: float
    cab: float
    vb: float


def _fit(near: list[Probe]) -> _Fit | None:
    """Poisson regression with a log link, by iteratively reweighted least squares, with a
    sandwich variance whose middle is each probe's own batch-means variance (see the module
    docstring)."""
    rows = [(p.qps, ex.over, ex.n, ex) for p in near if (ex := p.summary.exceed) is not None]
    xbar = math.fsum(x for x, _, _, _ in rows) / len(rows)
    xs = [x - xbar for x, _, _, _ in rows]
    eta = [math.log((over + 0.5) / n) for _, over, n, _ in rows]
    a = b = 0.0
    mu: list[float] = []
    s0 = s1 = s2 = det = 0.0
    for _ in range(50):
        mu = [n * math.exp(e) for (_, _, n, _), e in zip(rows, eta, strict=True)]
        z = [e + (over - m) / m for (_, over, _, _), e, m in zip(rows, eta, mu, strict=True)]
        s0 = math.fsum(mu)
        s1 = math.fsum(m * x for m, x in zip(mu, xs, strict=True))
        s2 = math.fsum(m * x * x for m, x in zip(mu, xs, strict=True))
        t0 = math.fsum(m * zi for m, zi in zip(mu, z, strict=True))
        t1 = math.fsum(m * x * zi for m, x, zi in zip(mu, xs, z, strict=True))
        det = s0 * s2 - s1 * s1
        if det <= 0:
            return None
        new_a, new_b = (s2 * t0 - s1 * t1) / det, (s0 * t1 - s1 * t0) / det
        done = abs(new_a - a) < 1e-10 and abs(new_b - b) < 1e-10
        a, b = new_a, new_b
        eta = [min(a + b * x, 0.0) for x in xs]
        if done:
            break
    bread = [[s2 / det, -s1 / det], [-s1 / det, s0 / det]]
    pooled = _dispersion(near)
    # the middle: each count's variance, its probe's dispersion times the fitted mean
    m00 = m01 = m11 = 0.0
    for (_, over, n, ex), mi, x in zip(rows, mu, xs, strict=True):
        own = pooled  # a probe with fewer than two late requests has no spread of its own
        if over >= 2 and math.isfinite(ex.se) and 0 < ex.share < 1:
            own = max(1.0, ex.se**2 * n / (ex.share * (1 - ex.share)))
        v = own * mi
        m00 += v
        m01 += v * x
        m11 += v * x * x
    (b00, b01), (_, b11) = bread
    va = b00 * (b00 * m00 + b01 * m01) + b01 * (b00 * m01 + b01 * m11)
    cab = b00 * (b01 * m00 + b11 * m01) + b01 * (b01 * m01 + b11 * m11)
    vb = b01 * (b01 * m00 + b11 * m01) + b11 * (b01 * m01 + b11 * m11)
    return _Fit(a, b, xbar, va, cab, vb)


def _line(probes: list[Probe], centre: float, q: float, level: float) -> _Line | None:
    """The pooled fit (see the module docstring); None where it cannot be made or its crossing
    is not bounded (Fieller's interval)."""
    near = _near(probes, centre, q)
    late = sum(p.summary.exceed.over for p in near if p.summary.exceed is not None)
    if len({p.qps for p in near}) < 2 or late == 0:
        return None
    fit = _fit(near)
    if fit is None or fit.b <= 0:  # higher rates did not miss more often: no crossing to read
        return None
    a, b = fit.a, fit.b
    c = math.log(1 - q)
    x0 = (c - a) / b
    z2 = NormalDist().inv_cdf((1 + level) / 2) ** 2
    # Fieller: the x with (a + b x - c)^2 <= z^2 Var(a + b x)
    qa = b * b - z2 * fit.vb
    qb = 2 * ((a - c) * b - z2 * fit.cab)
    qc = (a - c) ** 2 - z2 * fit.va
    disc = qb * qb - 4 * qa * qc
    if qa <= 0 or disc < 0:
        return None
    root = math.sqrt(disc)
    low, high = (-qb - root) / (2 * qa), (-qb + root) / (2 * qa)
    if fit.xbar + low <= 0:  # the interval reaches down to no load: the line bounds nothing
        return None
    return _Line(fit.xbar + x0, fit.xbar + low, fit.xbar + high)


def _bracket(probes: list[Probe]) -> tuple[float | None, float | None]:
    """The highest rate verified below the lowest that missed the limit, and that lowest."""
    missed = [p.qps for p in probes if p.outcome == MISSES]
    high = min(missed) if missed else None
    met = [p.qps for p in probes if p.verified and (high is None or p.qps < high)]
    return (max(met) if met else None), high


def _side(p: Probe) -> int:
    """-1 where the probe's p99 (its sample value) is within the limit, +1 where above."""
    tail = p.summary.latency[p.summary.claimed or "p99"]
    limit = p.summary.limit_ms or math.inf
    return -1 if math.isfinite(tail.value) and tail.value <= limit else 1


def _straddle(probes: list[Probe]) -> tuple[float | None, float | None]:
    """The highest rate whose sample p99 was within the limit below the lowest whose was not."""
    above = [p.qps for p in probes if _side(p) > 0]
    high = min(above) if above else None
    below = [p.qps for p in probes if _side(p) < 0 and (high is None or p.qps < high)]
    return (max(below) if below else None), high


def find_peak(
    probe: ProbeFn,
    limit_ms: float,
    start_qps: float,
    *,
    probe_s: float = 60.0,
    max_probes: int = 10,
    target: float = 0.05,
    bracket_share: float = 0.25,
    max_probe_s: float | None = None,
    q: float = 0.99,
    level: float = 0.95,
    on_probe: Callable[[Probe], None] | None = None,
) -> Peak:
    """QPS* for ``limit_ms`` (see the module docstring)."""
    max_probe_s = max_probe_s if max_probe_s is not None else 8 * probe_s
    if not (math.isfinite(start_qps) and start_qps > 0):
        raise ConfigError(f"the peak search needs a positive start rate, got {start_qps!r}")
    if max_probes < 4:
        raise ConfigError(f"the peak search needs at least 4 probes, got {max_probes}")
    probes: list[Probe] = []
    short_s = probe_s * bracket_share

    def run(qps: float, phase: str, seconds: float) -> Probe:
        # a short probe still holds enough requests to claim a p99 several times over
        if phase != "boundary":
            seconds = min(probe_s, max(seconds, BRACKET_REQUESTS / qps))
        found = Probe(len(probes), qps, seconds, phase, probe(qps, seconds, len(probes)))
        probes.append(found)
        if on_probe is not None:
            on_probe(found)
        return found

    # 1. bracket on log-QPS by the probes' sample p99; 2. bisect; both with short probes,
    # keeping at least ``BOUNDARY_MIN`` probes for the boundary
    qps = start_qps
    while len(probes) < max_probes - BOUNDARY_MIN:
        low, high = _straddle(probes)
        if low is not None and high is not None:
            if high / low <= BISECT_UNTIL:
                break
            qps, phase = math.sqrt(low * high), "bisect"
        else:
            phase = "bracket"
            if probes:
                qps = probes[-1].qps * (2.0 if _side(probes[-1]) < 0 else 0.5)
        run(qps, phase, short_s)
    # 3. boundary: probes below and above the estimate, alternately, each at least
    # ``probe_s`` long and longer where the interval so far says the time left needs it
    side = -1
    while len(probes) < max_probes:
        centre = _centre(probes, q, level)
        line = _line(probes, centre, q, level)
        seconds = probe_s
        boundary = [p.duration_s for p in probes if p.phase == "boundary"]
        if line is not None and len(boundary) >= BOUNDARY_MIN:
            half = (line.high - line.low) / 2 / line.qps
            if half <= target:
                break
            # the width falls as one over the root of the boundary's seconds
            spent = sum(boundary)
            wanted = spent * (half / target) ** 2 * MARGIN - spent
            seconds = min(max_probe_s, max(probe_s, wanted / (max_probes - len(probes))))
        run(centre * (1 + side * SPREAD), "boundary", seconds)
        side = -side
    return _result(probes, limit_ms, q, level)


def _centre(probes: list[Probe], q: float, level: float) -> float:
    """The current estimate of QPS*: the line's, else the geometric midpoint of the rates whose
    sample p99 straddle the limit, else the last rate probed."""
    low, high = _straddle(probes)
    guess = math.sqrt(low * high) if low and high else (low or high or probes[-1].qps)
    line = _line(probes, guess, q, level)
    if line is not None and guess / RATE_RANGE <= line.qps <= guess * RATE_RANGE:
        return line.qps
    return guess


def _result(probes: list[Probe], limit_ms: float, q: float, level: float) -> Peak:
    centre = _centre(probes, q, level)
    line = _line(probes, centre, q, level)
    met = [p.qps for p in probes if p.verified]
    verified = max(met) if met else None
    if line is not None:
        return Peak(limit_ms, q, line.qps, line.low, line.high, "line", verified, probes, level)
    low, high = _bracket(probes)  # low None: no probe verified a rate, so no lower bound
    hi = high if high is not None else math.inf
    return Peak(limit_ms, q, centre, low, hi, "bracket", verified, probes, level)
