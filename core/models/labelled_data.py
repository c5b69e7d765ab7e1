"""Labelled data for the accuracy pass: a built-in set by name, an ``.npz`` file, or a loader.

A reference (``AccuracySettings.data``) is one of

- a built-in name: ``digits`` is scikit-learn's ``load_digits`` (1,797 labelled 8x8 grey images
  of the digits 0-9, shipped inside the scikit-learn wheel, no download), given as float32
  ``(1797, 1, 8, 8)`` in [0, 1] (the 0..16 pixel values over 16) with int64 labels. Read from
  the wheel's ``datasets/data/digits.csv.gz`` without importing scikit-learn (its import pulls
  scipy and costs a trial's worker ~1 s), falling back to ``load_digits`` itself.
  ``digits-train`` and ``digits-test`` are one fixed split of it (``digits_split``: 1,257 and
  540 samples, seeded, the same on every machine): the DLAS zoo (``ngb.core.models.dlas_zoo``)
  trains on the first and every accuracy it reports is on the second, which no model has seen;
- an ``.npz`` file holding an ``inputs`` and a ``labels`` array;
- ``package.module:loader`` or ``path/to/file.py:loader``: a callable taking no argument that
  returns ``(inputs, labels)`` or a mapping with those two keys (numpy arrays, or anything
  ``numpy.asarray`` takes: lists, CPU torch tensors).

Every way the data can be wrong is one ``ConfigError`` line naming the reference: a missing or
unreadable file, a loader that fails to import or raises, labels that are not one class index
per sample, a label count that differs from the input count, NaN or infinite inputs, no samples.
Whether the samples fit the model (``fit_inputs``) is checked where the model's example is known.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from ngb.core.base.errors import ConfigError, NgbError, one_line
from ngb.core.base.safe_files import check_readable
from ngb.core.models.model_build import import_file, no_bytecode_files

#: built-in data sets by name -> one line for ``--help`` and errors
BUILTIN: dict[str, str] = {
    "digits": "scikit-learn's load_digits: 1,797 8x8 digit images, 10 classes, (n, 1, 8, 8) "
    "float32 in [0, 1]",
    "digits-train": "the 1,257 digits the DLAS zoo trains on (a fixed, seeded split)",
    "digits-test": "the 540 held-out digits every DLAS accuracy is measured on",
}
#: the digits split: its seed and how many samples are held out for testing (30 %)
SPLIT_SEED = 20261128
TEST_SAMPLES = 540
_MODULE_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")


@dataclass(frozen=True)
class LabelledSet:
    """Inputs ``(samples, ...)`` and one integer class index per sample."""

    name: str
    inputs: np.ndarray
    labels: np.ndarray

    @property
    def samples(self) -> int:
        return int(self.labels.shape[0])

    @property
    def classes(self) -> int:
        """The classes the labels name (the highest label + 1)."""
        return int(self.labels.max()) + 1


def kind_of(ref: str) -> str:
    """``builtin``, ``npz`` or ``loader``; a reference that is none of them is refused."""
    if ref in BUILTIN:
        return "builtin"
    if ref.endswith(".npz"):
        return "npz"
    target, sep, attr = ref.rpartition(":")
    if sep and attr.isidentifier() and (target.endswith(".py") or _MODULE_RE.fullmatch(target)):
        return "loader"
    raise ConfigError(
        f"labelled data {ref!r}: expected a built-in name ({', '.join(BUILTIN)}), an .npz file "
        "with inputs and labels, or package.module:loader / file.py:loader"
    )


def resolve(ref: str, base: Path | None = None) -> str:
    """The reference with a relative file made absolute from ``base`` (default: the cwd), as a
    sweep file and the command line write it down; the file must exist."""
    kind = kind_of(ref)
    if kind == "builtin":
        return ref
    if kind == "npz":
        return str(_existing(Path(ref), base, ref))
    target, _, attr = ref.rpartition(":")
    if target.endswith(".py"):
        return f"{_existing(Path(target), base, ref)}:{attr}"
    return ref


def _existing(path: Path, base: Path | None, ref: str) -> Path:
    full = ((base or Path.cwd()) / path.expanduser()).resolve()
    if not full.exists():
        raise ConfigError(f"labelled data file not found: {full} (from {ref!r})")
    try:
        check_readable(full, "labelled data")  # a FIFO would block the reader for ever
    except NgbError as exc:
        raise ConfigError(str(exc)) from None
    return full


def load(ref: str, base: Path | None = None) -> LabelledSet:
    """The labelled set ``ref`` names, checked (see the module docstring for the errors)."""
    kind = kind_of(ref)
    inputs: object
    labels: object
    if kind == "builtin":
        inputs, labels = _digits()
        if ref != "digits":
            part = digits_split()[ref.removeprefix("digits-")]
            inputs, labels = inputs[part], labels[part]
    elif kind == "npz":
        inputs, labels = _npz(_existing(Path(ref), base, ref), ref)
    else:
        inputs, labels = _call_loader(ref, base)
    return check(ref, inputs, labels)


def check(ref: str, inputs: object, labels: object) -> LabelledSet:
    """Arrays from anywhere, checked and made numpy: inputs ``(n, ...)``, labels int64 ``(n,)``."""
    where = f"labelled data {ref}"
    try:
        x = np.asarray(inputs)
        y = np.asarray(labels)
    except Exception as exc:  # noqa: BLE001 - a loader's objects may refuse to become arrays
        raise ConfigError(f"{where}: not arrays: {one_line(exc)}") from None
    if x.ndim < 1 or x.shape[0] == 0:
        raise ConfigError(f"{where}: no samples (inputs of shape {x.shape})")
    if not np.issubdtype(x.dtype, np.number) or np.issubdtype(x.dtype, np.complexfloating):
        raise ConfigError(f"{where}: inputs must be real numbers, got {x.dtype}")
    if y.ndim != 1:
        raise ConfigError(
            f"{where}: labels must be one class index per sample, got shape {y.shape}"
        )
    if y.shape[0] != x.shape[0]:
        raise ConfigError(f"{where}: {y.shape[0]:,} labels for {x.shape[0]:,} inputs")
    if y.dtype == np.bool_ or not np.issubdtype(y.dtype, np.number):
        raise ConfigError(f"{where}: labels must be class indices, got {y.dtype}")
    if not np.issubdtype(y.dtype, np.integer):
        whole = np.isfinite(y).all() and bool((y == np.round(y)).all())
        if not whole:
            raise ConfigError(f"{where}: labels must be whole class indices, got {y.dtype} values")
    if (y < 0).any():
        raise ConfigError(f"{where}: labels must be class indices >= 0, found {y.min()}")
    if np.issubdtype(x.dtype, np.floating):
        bad = ~np.isfinite(x.reshape(x.shape[0], -1)).all(axis=1)
        if bad.any():
            raise ConfigError(f"{where}: inputs hold NaN or inf in {int(bad.sum())} samples")
    return LabelledSet(ref, x, y.astype(np.int64))


def describe(ref: str, base: Path | None = None) -> str:
    """``digits: 1,797 samples of 1x8x8 float32, 10 classes`` (the set loaded and checked)."""
    data = load(ref, base)
    shape = _dims(tuple(int(d) for d in data.inputs.shape[1:]))
    return f"{ref}: {data.samples:,} samples of {shape} {data.inputs.dtype}, {data.classes} classes"


def fit_inputs(data: LabelledSet, sample_shape: tuple[int, ...]) -> np.ndarray:
    """The inputs as the model takes a sample (``sample_shape``: its example without the batch
    dimension). Equal shapes pass; the same number of values is reshaped (8x8 images for a model
    of 64 features); anything else is one line saying both shapes."""
    got = tuple(int(d) for d in data.inputs.shape[1:])
    if got == sample_shape:
        return data.inputs
    if int(np.prod(got)) == int(np.prod(sample_shape)):
        return data.inputs.reshape((data.samples, *sample_shape))
    raise ConfigError(
        f"labelled data {data.name}: samples of shape {_dims(got)} do not fit the model, which "
        f"takes {_dims(sample_shape)} per sample"
    )


def _dims(shape: tuple[int, ...]) -> str:
    return "x".join(map(str, shape)) or "a scalar"


def _digits() -> tuple[np.ndarray, np.ndarray]:
    spec = importlib.util.find_spec("sklearn")  # finds, does not import
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError(
            "labelled data digits needs scikit-learn (pip install scikit-learn; it is in ngb's "
            "bench extra)"
        )
    csv = Path(next(iter(spec.submodule_search_locations))) / "datasets" / "data" / "digits.csv.gz"
    if csv.is_file():
        table = np.loadtxt(csv, delimiter=",", dtype=np.float64)
        images, labels = table[:, :-1], table[:, -1].astype(np.int64)
    else:  # another layout of the wheel: scikit-learn's own loader
        from sklearn.datasets import load_digits

        bunch = load_digits()
        images, labels = np.asarray(bunch.data), np.asarray(bunch.target, dtype=np.int64)
    inputs = (images / 16.0).astype(np.float32).reshape(-1, 1, 8, 8)
    return inputs, labels


def digits_split() -> dict[str, np.ndarray]:
    """Indices of ``digits`` in its two parts, ``train`` and ``test``, each in ascending order:
    a permutation from ``SPLIT_SEED`` (numpy's PCG64 gives the same one everywhere), its first
    ``TEST_SAMPLES`` held out."""
    order = np.random.default_rng(SPLIT_SEED).permutation(1797)
    return {"test": np.sort(order[:TEST_SAMPLES]), "train": np.sort(order[TEST_SAMPLES:])}


def _npz(path: Path, ref: str) -> tuple[np.ndarray, np.ndarray]:
    try:
        with np.load(path, allow_pickle=False) as archive:
            names = list(archive.files)
            missing = [k for k in ("inputs", "labels") if k not in names]
            if missing:
                raise ConfigError(
                    f"labelled data {ref}: no {missing[0]!r} array in the file (it holds: "
                    f"{', '.join(names) or 'nothing'})"
                )
            return archive["inputs"], archive["labels"]
    except ConfigError:
        raise
    except Exception as exc:  # noqa: BLE001 - not a zip, pickled objects, a truncated file
        raise ConfigError(f"labelled data {ref}: cannot read it as .npz: {one_line(exc)}") from None


def _call_loader(ref: str, base: Path | None) -> tuple[object, object]:
    target, _, attr = ref.rpartition(":")
    try:
        with no_bytecode_files():
            if target.endswith(".py"):
                path = _existing(Path(target), base, ref)
                digest = hashlib.sha256(str(path).encode()).hexdigest()
                module = import_file(path.parent, path.name, digest)
            else:
                module = importlib.import_module(target)
    except ConfigError:
        raise
    except Exception as exc:  # noqa: BLE001 - user code raises anything at import
        raise ConfigError(f"labelled data {ref}: cannot import {target}: {one_line(exc)}") from None
    loader = getattr(module, attr, None)
    if not callable(loader):
        raise ConfigError(f"labelled data {ref}: {target} has no function {attr!r}")
    typed: Callable[[], object] = loader
    try:
        with no_bytecode_files():
            got = typed()
    except Exception as exc:  # noqa: BLE001 - user code
        raise ConfigError(f"labelled data loader {ref} raised {one_line(exc)}") from None
    if isinstance(got, Mapping) and "inputs" in got and "labels" in got:
        return got["inputs"], got["labels"]
    if isinstance(got, tuple | list) and len(got) == 2:
        return got[0], got[1]
    raise ConfigError(
        f"labelled data loader {ref} returned {type(got).__name__}; expected (inputs, labels) "
        "or a mapping with 'inputs' and 'labels'"
    )
