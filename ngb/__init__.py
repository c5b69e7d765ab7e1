"""ngb -- NGraphBench: a benchmark of neural graph compilers over a testbed of devices.

The sub-packages ``ngb.core``, ``ngb.devices``, ``ngb.sweeps`` and ``ngb.tui`` are the checkout's
top-level folders (links here, real files in the wheel). The public Python API, for notebooks:

    import ngb
    r = ngb.measure("conv", compiler="identity", width=16)   # -> ngb.Result (identity: eager)
    r.throughput, r.interval, r.verdict
    mine = ngb.measure("/path/mymodel.py:build", compiler="onnxruntime", batch=4,
                       kwargs={"width": 16}, inputs=["image:batch,3,32,32"],
                       family="mine", db="results.duckdb", run="exp1")
    onnx = ngb.measure("model.onnx", compiler="onnxruntime", batch=4, db="results.duckdb",
                       run="exp1")                       # inputs read from the graph
    ngb.compare(onnx, mine)                              # speed-up, interval, "n.s."
    results, samples = ngb.open_results("results.duckdb", run="exp1")  # pandas DataFrames
    ngb.serve("resnet18", compiler="openvino", qps=40, duration=60, p99_ms=100)  # under load

The names are loaded on first use (PEP 562) from ``ngb.sweeps.api.notebook``, so ``import ngb``
imports no torch, duckdb or pandas.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

__version__ = "0.1.0"
__all__ = [
    "Comparison", "Result", "Served", "compare", "measure", "open_results", "serve",
    "__version__",
]  # fmt: skip

if TYPE_CHECKING:
    from ngb.sweeps.api.notebook import Comparison, Result, compare, measure, open_results
    from ngb.sweeps.api.serving import Served, serve

_API = {"Comparison", "Result", "compare", "measure", "open_results"}
_SERVING = {"Served", "serve"}  # ngb.sweeps.api.serving (issue 43)


def __getattr__(name: str) -> object:
    if name in _API:
        from ngb.sweeps.api import notebook as api

        return getattr(api, name)
    if name in _SERVING:
        from ngb.sweeps.api import serving

        return getattr(serving, name)
    raise AttributeError(f"module 'ngb' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | _API | _SERVING)
