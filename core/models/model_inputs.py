"""A model's named inputs: ``InputSpec`` (name, shape with at most one ``"batch"`` dimension,
dtype, integer range) and its command-line form (``parse_input``).

Below both ``ngb.core.models.model_sources`` (where a model comes from) and
``ngb.core.models.onnx_graph`` (inputs read from an ONNX graph); ``model_sources`` imports
``onnx_graph`` and re-exports these names, so there is no import loop between the two (issue 22).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from ngb.core.base.errors import ConfigError

__all__ = [
    "BATCH", "DEFAULT_INT_RANGE", "DTYPES", "InputSpec", "assumed_ranges", "index_range",
    "parse_input",
]  # fmt: skip

BATCH = "batch"
# dtype name -> is it an integer type (needs a value range)
DTYPES: dict[str, bool] = {
    "float32": False,
    "float16": False,
    "bfloat16": False,
    "float64": False,
    "int64": True,
    "int32": True,
    "bool": True,
}
DEFAULT_INT_RANGE = (0, 2)  # bool and int inputs without a range: 0/1 (always a valid index)


@dataclass(frozen=True)
class InputSpec:
    """One named model input; ``shape`` holds ints and at most one ``"batch"``."""

    name: str
    shape: tuple[int | str, ...]
    dtype: str = "float32"
    range: tuple[int, int] | None = None  # integer inputs: values drawn from [low, high)
    # how the range was found when ngb inferred it (e.g. "embedding 50 rows", or "assumed: ..."
    # when the file does not say); shown in listings, never part of a trial's key
    range_note: str | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        where = f"input {self.name!r}"
        if not isinstance(self.name, str) or not self.name:
            raise ConfigError(f"input name must be a non-empty string, got {self.name!r}")
        if self.dtype not in DTYPES:
            raise ConfigError(f"{where}: dtype {self.dtype!r} not one of {', '.join(DTYPES)}")
        for dim in self.shape:
            ok = dim == BATCH or (isinstance(dim, int) and not isinstance(dim, bool) and dim > 0)
            if not ok:
                raise ConfigError(
                    f"{where}: shape entries are positive integers or {BATCH!r}, got {dim!r}"
                )
        if list(self.shape).count(BATCH) > 1:
            raise ConfigError(f"{where}: mark at most one dimension {BATCH!r}")
        if self.range is not None:
            if not DTYPES[self.dtype]:
                raise ConfigError(f"{where}: range applies to integer inputs, not {self.dtype}")
            low, high = self.range
            if not all(isinstance(v, int) and not isinstance(v, bool) for v in (low, high)):
                raise ConfigError(f"{where}: range must be two integers [low, high)")
            if high <= low:
                raise ConfigError(f"{where}: range [low, high) needs high > low, got {self.range}")

    def concrete(self, batch: int) -> tuple[int, ...]:
        return tuple(batch if d == BATCH else int(d) for d in self.shape)

    def to_dict(self) -> dict[str, object]:
        out: dict[str, object] = {"name": self.name, "shape": list(self.shape), "dtype": self.dtype}
        if self.range is not None:
            out["range"] = list(self.range)
        return out

    @classmethod
    def from_dict(cls, data: object) -> InputSpec:
        if not isinstance(data, Mapping):
            raise ConfigError(f"an input is a table with name, shape, dtype, range; got {data!r}")
        unknown = sorted(set(data) - {"name", "shape", "dtype", "range"})
        if unknown:
            raise ConfigError(
                f"input: unknown key {unknown[0]!r} (valid: name, shape, dtype, range)"
            )
        shape, rng = data.get("shape"), data.get("range")
        if not isinstance(shape, list | tuple):
            raise ConfigError(f"input {data.get('name')!r}: shape must be a list, got {shape!r}")
        if rng is not None and (not isinstance(rng, list | tuple) or len(rng) != 2):
            raise ConfigError(f"input {data.get('name')!r}: range must be [low, high)")
        return cls(
            name=data.get("name"),  # type: ignore[arg-type]  # checked in __post_init__
            shape=tuple(shape),
            dtype=data.get("dtype", "float32"),
            range=tuple(rng) if rng is not None else None,  # type: ignore[arg-type]
        )


def parse_input(text: str) -> InputSpec:
    """The command-line form ``NAME:SHAPE[:DTYPE[:LOW-HIGH]]``, e.g. ``x:batch,16:int64:0-1000``."""
    parts = text.split(":")
    if len(parts) < 2 or len(parts) > 4:
        raise ConfigError(f"--input wants NAME:SHAPE[:DTYPE[:LOW-HIGH]], got {text!r}")
    dims: list[int | str] = []
    for dim in parts[1].split(","):
        dim = dim.strip()
        dims.append(dim if dim == BATCH else _int(dim, text))
    rng = None
    if len(parts) == 4:
        low, sep, high = parts[3].partition("-")
        if not sep:
            raise ConfigError(f"--input range is LOW-HIGH, got {parts[3]!r} in {text!r}")
        rng = (_int(low, text), _int(high, text))
    return InputSpec(parts[0], tuple(dims), parts[2] if len(parts) > 2 else "float32", rng)


def _int(text: str, whole: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise ConfigError(f"{text!r} is not an integer (in {whole!r})") from None


def assumed_ranges(inputs: tuple[InputSpec, ...] | list[InputSpec]) -> list[str]:
    """One warning line per integer input whose range the file did not give (ngb assumed it)."""
    return [
        f"input {i.name!r} ({i.dtype}): {i.range_note}"
        for i in inputs
        if i.range_note and i.range_note.startswith("assumed")
    ]


def index_range(rows: int | None, source: str) -> tuple[tuple[int, int], str]:
    """An integer input's range and the note that says where it came from: the rows of the table
    it indexes, else ``DEFAULT_INT_RANGE`` with the ``source`` (the program, the graph) named as
    not bounding it."""
    if rows is not None:
        return (0, rows), f"from the {rows}-row table it indexes"
    low, high = DEFAULT_INT_RANGE
    return DEFAULT_INT_RANGE, (
        f"assumed {low}..{high - 1}: {source} does not bound it; declare inputs with a range"
    )
