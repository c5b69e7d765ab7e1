"""Model sources: where a user's model comes from, what it is fed, and which files travel with it.

A trial names its model (``TrialSpec.model``) by the name the user gave it (a ``[[models]]`` name,
``ngb measure --name``, ``ngb.measure(name=)``) or else by ``default_name``, which does not depend
on the path it was reached by; for anything but a plain timm name or a synthetic block,
``TrialSpec.source`` carries a ``ModelSource`` as plain JSON:

- ``timm``: a timm name with ``kwargs`` for ``timm.create_model`` (num_classes, img_size...);
- ``python``: ``"package.module:factory"`` or ``"path/to/file.py:factory"`` called with ``kwargs``,
  returning an ``nn.Module``; the code folder travels as an artifact (a package folder whose parent
  goes on ``sys.path``, or a file's folder, which goes on ``sys.path`` itself);
- ``onnx``: an ONNX file, run only by compilers that take ONNX; external data files beside it
  (``model.onnx.data``, torch's exporter's default for large models) travel with it;
- ``pt2``: a ``torch.export`` program saved with ``torch.export.save``.

Inputs (``InputSpec``): a name, a shape in which the string ``"batch"`` marks the batch dimension,
a dtype, and for integer inputs a value range ``[low, high)``. Defaults come from the source: the
timm pretrained config (or ``img_size``), the ONNX graph's inputs (a symbolic first dimension is
the batch), the exported program's placeholders. A source whose inputs have no batch dimension
runs at one fixed batch (``ModelSource.fixed_batch``).

Artifacts are content-addressed: a file's sha256 is the hash of its bytes; a folder's is the
sha256 of ``"<relative posix path>\\0<file sha256>\\n"`` lines over ``folder_files`` (sorted: a
package whole, any other folder as its ``.py`` files and packages; caches, VCS, hidden and ngb's
own files such as a results store left out); a model file with external data files, the same
lines over the model and its data files (``bundle_sha256``). On a device an artifact lives at
``<cache_dir>/artifacts/<sha256>/<name>`` (``artifact_dir``); ``ngb.devices`` uploads it there
once and checks the hash with ``sha256_of``. On the workstation (``ngb measure``, the built-in
localhost) the recorded local path is used when its hash still matches.

Nothing heavy is imported at module level: parsing a sweep needs neither torch nor onnx (ONNX
files are read with ``onnx`` only when the sweep has one).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ngb.core.base.artifact_files import ARTIFACTS_SUBDIR as ARTIFACTS_SUBDIR  # re-exported
from ngb.core.base.artifact_files import NGB_FILE_SUFFIXES as NGB_FILE_SUFFIXES  # re-exported
from ngb.core.base.artifact_files import SKIP_NAMES as SKIP_NAMES  # re-exported
from ngb.core.base.artifact_files import Artifact as Artifact  # re-exported
from ngb.core.base.artifact_files import artifact_dir as artifact_dir  # re-exported
from ngb.core.base.artifact_files import bundle_sha256 as bundle_sha256  # re-exported
from ngb.core.base.artifact_files import changed_since as changed_since  # re-exported
from ngb.core.base.artifact_files import folder_files as folder_files  # re-exported
from ngb.core.base.artifact_files import locate as locate  # re-exported
from ngb.core.base.artifact_files import sha256_of as sha256_of  # re-exported
from ngb.core.base.errors import ConfigError
from ngb.core.base.safe_files import check_readable, shorten
from ngb.core.models import onnx_graph
from ngb.core.models.model_inputs import BATCH, InputSpec
from ngb.core.models.model_inputs import DEFAULT_INT_RANGE as DEFAULT_INT_RANGE  # re-exported
from ngb.core.models.model_inputs import DTYPES as DTYPES  # re-exported
from ngb.core.models.model_inputs import parse_input as parse_input  # re-exported

if TYPE_CHECKING:
    from ngb.core.records.types import TrialSpec

KINDS = ("timm", "python", "onnx", "pt2")
_MODULE_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")


# ---------------------------------------------------------------- sources


@dataclass(frozen=True)
class ModelSource:
    """A user's model: ``kind`` (``KINDS``), ``ref`` (timm name, ``module:factory``,
    ``file.py:factory`` relative to the code folder, or the model file's name)."""

    kind: str
    ref: str
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    inputs: tuple[InputSpec, ...] = ()
    artifacts: tuple[Artifact, ...] = ()
    # the model family reports and the console group it under (the sweep's ``family`` key);
    # None: the model's own name. Only written when set, so older trial keys stay the same.
    family: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ConfigError(f"model source kind {self.kind!r} not one of {', '.join(KINDS)}")
        names = [i.name for i in self.inputs]
        if len(set(names)) != len(names):
            raise ConfigError(f"input names must be unique, got {names}")

    @property
    def takes(self) -> str:
        """What a compiler must accept to run this model: ``torch`` or ``onnx``."""
        return "onnx" if self.kind == "onnx" else "torch"

    @property
    def describe(self) -> str:
        """Short text for listings: ``onnx model.onnx``, ``python enc.py:build``."""
        return f"{self.kind} {self.ref}"

    def fixed_batch(self) -> int | None:
        """None when an input marks a batch dimension; else the one batch this model runs at."""
        if not self.inputs or any(BATCH in i.shape for i in self.inputs):
            return None
        first = self.inputs[0].shape
        return int(first[0]) if first else 1

    def check_batch(self, batch: int, model: str) -> None:
        fixed = self.fixed_batch()
        if fixed is not None and batch != fixed:
            raise ConfigError(
                f"model {model!r} has static input shapes for batch {fixed}; batch {batch} needs "
                f"an input dimension marked {BATCH!r} (a dynamic first dimension in the file)"
            )

    def to_dict(self) -> dict[str, object]:
        out: dict[str, object] = {"kind": self.kind, "ref": self.ref}
        if self.kwargs:
            out["kwargs"] = dict(self.kwargs)
        if self.inputs:
            out["inputs"] = [i.to_dict() for i in self.inputs]
        if self.artifacts:
            out["artifacts"] = [a.to_dict() for a in self.artifacts]
        if self.family:
            out["family"] = self.family
        return out

    @classmethod
    # Any: a source read back as JSON (a trial's spec, the store); the fields are checked here
    # and in __post_init__
    def from_dict(cls, data: Mapping[str, Any]) -> ModelSource:
        family = data.get("family")
        return cls(
            kind=data["kind"],
            ref=data["ref"],
            kwargs=dict(data.get("kwargs") or {}),
            inputs=tuple(InputSpec.from_dict(i) for i in data.get("inputs") or ()),
            artifacts=tuple(Artifact.from_dict(a) for a in data.get("artifacts") or ()),
            family=family if isinstance(family, str) and family else None,
        )


def source_of(spec: TrialSpec) -> ModelSource | None:
    """The ``ModelSource`` of a ``TrialSpec`` (None for plain timm names and blocks)."""
    raw = getattr(spec, "source", None)
    return ModelSource.from_dict(raw) if raw else None


def parse_source(
    text: str,
    *,
    kwargs: Mapping[str, object] | None = None,
    inputs: Sequence[InputSpec] = (),
    code: str | None = None,
    base_dir: Path | str | None = None,
) -> ModelSource:
    """Read a user's source text; relative paths are taken from ``base_dir`` (the sweep's folder).

    Checks what can be checked without torch: files exist, names are well formed, ONNX files parse
    and declared inputs match the graph.
    """
    if not isinstance(text, str) or not text.strip():
        raise ConfigError(f"model source must be a non-empty string, got {text!r}")
    text = text.strip()
    base = Path(base_dir) if base_dir is not None else Path.cwd()
    kwargs = dict(kwargs or {})
    if code is not None and ":" not in text:
        raise ConfigError(f"code = {code!r} applies to python sources (module:factory)")
    lower = text.lower()
    if lower.endswith((".onnx", ".pt2")):
        kind = "onnx" if lower.endswith(".onnx") else "pt2"
        if kwargs:
            raise ConfigError(f"kwargs apply to timm and python sources, not to a .{kind} file")
        path = _existing(base, text, "model file")
        data_files = onnx_graph.external_files(path) if kind == "onnx" else ()
        artifact = Artifact.of(path, "model", data_files)
        declared = tuple(inputs)
        if kind == "onnx":
            declared = onnx_graph.merge_inputs(path, declared)
        return ModelSource(kind, path.name, {}, declared, (artifact,))
    if ":" in text:
        return _python_source(text, kwargs, tuple(inputs), code, base)
    return ModelSource("timm", text, kwargs, tuple(inputs))


def _existing(base: Path, text: str, what: str) -> Path:
    path = (base / Path(text).expanduser()).resolve()
    if not path.exists():
        raise ConfigError(f"{what} not found: {shorten(path)}")
    if what != "code folder":
        check_readable(path, what)  # a FIFO or device would block or mislead the loaders
    return path


def _python_source(
    text: str,
    kwargs: Mapping[str, object],
    inputs: tuple[InputSpec, ...],
    code: str | None,
    base: Path,
) -> ModelSource:
    target, _, factory = text.rpartition(":")
    if not factory.isidentifier():
        raise ConfigError(f"python source {text!r}: {factory!r} is not a function name")
    if target.endswith(".py"):
        file = _existing(base, target, "python file")
        folder = _existing(base, code, "code folder") if code else file.parent
        try:
            rel = file.relative_to(folder)
        except ValueError:
            raise ConfigError(
                f"python file {file} is not inside its code folder {folder}"
            ) from None
        if file not in set(folder_files(folder)):
            raise ConfigError(
                f"python file {rel.as_posix()} is in a folder without __init__.py under its code "
                f"folder {shorten(folder)}, so it would not travel; make that folder a package "
                "or name the file's own folder as code"
            )
        artifact = Artifact.of(folder, "folder")
        return ModelSource("python", f"{rel.as_posix()}:{factory}", kwargs, inputs, (artifact,))
    if not _MODULE_RE.fullmatch(target):
        raise ConfigError(
            f"python source {text!r}: expected package.module:factory or path/to/file.py:factory"
        )
    top = target.split(".", 1)[0]
    package = (_existing(base, code, "code folder") if code is not None else base) / top
    if package.is_dir():
        artifacts: tuple[Artifact, ...] = (Artifact.of(package, "package"),)
    elif package.with_suffix(".py").is_file():  # a single top-level module beside the sweep
        artifacts = (Artifact.of(package.with_suffix(".py"), "package"),)
    elif code is not None:
        raise ConfigError(f"python source {text!r}: no {top!r} in code folder {code!r}")
    else:
        artifacts = ()  # an installed package: it must be installed on the device too
    return ModelSource("python", text, kwargs, inputs, artifacts)


def default_name(source: ModelSource) -> str:
    """The name a user's model gets when nobody names it: the same from any working directory
    and from every surface (``ngb measure``, ``ngb.measure``, a ``[[models]]`` table without a
    name), so its results form one series in ``ngb history`` (issue 45). A file is named by its
    own name (``tiny_cnn.onnx``), a python file by its name and factory (``resmlp.py:build``), a
    module by ``package.module:factory``, a timm model by its timm name -- never by the path it
    was reached by, which differs with the working directory and between machines."""
    if source.kind == "python":
        target, _, factory = source.ref.rpartition(":")
        return f"{target.rsplit('/', 1)[-1]}:{factory}"
    return source.ref.rsplit("/", 1)[-1]


def check_name(name: object, where: str) -> str:
    """A model's name as every surface stores it: non-empty, no '/', not a built-in block."""
    from ngb.core.records.types import BLOCK_MODELS

    if not isinstance(name, str) or not name.strip() or "/" in name or not name.isprintable():
        raise ConfigError(
            f"{where}: a model name must be a non-empty string without '/', got {name!r}"
        )
    if name.strip() in BLOCK_MODELS:
        raise ConfigError(f"{where}: {name.strip()!r} is a built-in block; choose another name")
    return name.strip()


def trial_name(typed: str, source: Mapping[str, Any] | None, name: object, where: str) -> str:
    """The name a trial of the model typed as ``typed`` is stored under: ``name`` when given
    (checked), else ``default_name`` of its source; a timm name or block as typed. ``where``
    names the argument in an error (``--name``, ``name``)."""
    if name is not None:
        if source is None:
            raise ConfigError(
                f"{where} names your own model; {typed!r} is a built-in or timm name already"
            )
        return check_name(name, where)
    return typed if source is None else default_name(ModelSource.from_dict(source))
