"""Trial specs have stable keys, validate their fields, and round-trip through JSON."""

from __future__ import annotations

import json
import math

import pytest
from ngb.core.base.errors import ConfigError, UnknownNameError
from ngb.core.records import events
from ngb.core.records.types import MeasureSettings, Stats, TrialResult, TrialSpec


def test_key_is_stable_and_ignores_option_order() -> None:
    a = TrialSpec(
        "resnet18", "openvino", batch=8, compiler_options={"hint": "THROUGHPUT", "nireq": 4}
    )
    b = TrialSpec(
        "resnet18", "openvino", batch=8, compiler_options={"nireq": 4, "hint": "THROUGHPUT"}
    )
    assert a.key == b.key and a == b and hash(a) == hash(b)
    assert len(a.key) == 16
    # Pinned value: a change here means every stored result would lose its identity on resume.
    assert TrialSpec("resnet18", "identity", batch=1).key == TrialSpec("resnet18", "identity").key


def test_key_changes_with_every_dimension() -> None:
    base = TrialSpec("conv", "identity", batch=8, depth=2, width=64)
    variants = [
        TrialSpec("conv", "identity", batch=16, depth=2, width=64),
        TrialSpec("conv", "identity", batch=8, depth=3, width=64),
        TrialSpec("conv", "identity", batch=8, depth=2, width=96),
        TrialSpec("conv", "tvm", batch=8, depth=2, width=64),
        TrialSpec("conv", "identity", batch=8, depth=2, width=64, optimisation="fp16"),
        TrialSpec(
            "conv", "identity", batch=8, depth=2, width=64, measure=MeasureSettings(repetitions=9)
        ),
    ]
    assert len({base.key, *(v.key for v in variants)}) == len(variants) + 1


def test_a_key_read_once_is_the_key_of_every_equal_spec() -> None:
    """The key is kept after its first read (a spec is frozen); an equal spec rebuilt from JSON,
    a pickle and a ``replace`` each carry the key their own fields give."""
    import dataclasses
    import pickle

    spec = TrialSpec("conv", "noop", batch=4, width=8, compiler_options={"b": 1, "a": 2})
    first = spec.key
    assert spec.key is first and hash(spec) == hash(first)
    assert TrialSpec.from_dict(json.loads(json.dumps(spec.to_dict()))).key == first
    assert pickle.loads(pickle.dumps(spec)).key == first
    other = dataclasses.replace(spec, batch=8)
    assert other.key != first and dataclasses.replace(other, batch=4).key == first
    assert "key" not in spec.to_dict()  # a cache, not a field: the spec's JSON is as before


def test_a_clean_event_encodes_as_the_nan_walk_did() -> None:
    event = events.make_event(events.CPU, key="k", percent=12.5, x=(1, [2.0, {"y": None}]))
    line = events.encode(event)
    assert line == json.dumps(events._nan_to_none(event), separators=(",", ":"))
    assert json.loads(line)["x"] == [1, [2.0, {"y": None}]]


def test_round_trip_through_json() -> None:
    spec = TrialSpec(
        "mha",
        "onnxruntime",
        batch=4,
        depth=3,
        width=128,
        compiler_options={"graph_optimization_level": "all"},
        measure=MeasureSettings(repetitions=7, threads=2),
    )
    again = TrialSpec.from_dict(json.loads(json.dumps(spec.to_dict())))
    assert again == spec and again.key == spec.key
    assert spec.label == "mha128x3/onnxruntime/b4"


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"model": "resnet18", "compiler": "identity", "batch": 0}, "batch must be > 0"),
        ({"model": "conv", "compiler": "identity"}, "needs a width"),
        ({"model": "conv", "compiler": "identity", "width": 64, "depth": -1}, "depth must be > 0"),
        ({"model": "", "compiler": "identity"}, "model must be"),
    ],
)
def test_invalid_specs_have_clear_errors(kwargs: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        TrialSpec(**kwargs)


def test_unknown_fields_are_named() -> None:
    with pytest.raises(ConfigError, match="unknown trial field 'batchsize'"):
        TrialSpec.from_dict({"model": "resnet18", "compiler": "identity", "batchsize": 2})
    with pytest.raises(ConfigError, match="unknown measure setting 'reps'"):
        MeasureSettings.from_dict({"reps": 3})
    with pytest.raises(ConfigError, match="repetitions must be > 0"):
        MeasureSettings(repetitions=0)


def test_result_round_trip_keeps_stats() -> None:
    spec = TrialSpec("resnet18", "identity", batch=2)
    res = TrialResult(key=spec.key, spec=spec.to_dict(), throughput=Stats(n=3, mean=10.0, std=0.5))
    line = events.encode(events.make_event(events.TRIAL_DONE, key=spec.key, result=res.to_dict()))
    back = TrialResult.from_dict(events.decode(line)["result"])
    assert back.throughput.mean == 10.0 and back.throughput.std == 0.5
    assert math.isnan(back.latency_ms.mean)  # NaN travels as null and comes back as NaN
    failed = TrialResult.failed(spec, "boom", "crash")
    assert not failed.ok and failed.error_kind == "crash" and failed.key == spec.key


def test_event_encoding_is_strict_json_and_decode_is_tolerant() -> None:
    line = events.encode(
        events.make_event(events.CPU, key="k", percent=math.nan, x=[1.0, math.inf])
    )
    obj = json.loads(line)
    assert (
        obj["percent"] is None and obj["x"] == [1.0, None] and obj["v"] == events.PROTOCOL_VERSION
    )
    assert events.decode('{"type": "log", "msg": "hi"') is None  # torn by kill -9
    assert events.decode("not json") is None
    assert events.decode("[1, 2]") is None
    assert events.decode("") is None


def test_unknown_name_error_suggests_close_matches() -> None:
    err = UnknownNameError("compiler", "openvno", ["openvino", "onnxruntime", "tvm"])
    assert "did you mean: openvino" in str(err) and err.close[0] == "openvino"


@pytest.mark.parametrize("value", [0.0, -0.1, 1.0001, float("nan"), float("inf")])
def test_a_disturbance_threshold_outside_0_to_1_is_refused(value: float) -> None:
    with pytest.raises(ConfigError, match="disturbance_threshold must be above 0 and at most 1"):
        MeasureSettings(disturbance_threshold=value)


def test_a_disturbance_threshold_of_1_never_flags_a_cpu_share_but_a_gpu_process_still_does():
    from ngb.core.trial.interference import disturbance

    assert MeasureSettings(disturbance_threshold=1).disturbance_threshold == 1
    assert disturbance(threshold=1.0, before=100.0, during=100.0) is None
    assert disturbance(threshold=0.999, before=None, during=100.0) is not None
    assert "GPU (pid 42)" in str(disturbance(threshold=1.0, before=0, during=0, gpu_others=[42]))
