"""The one trial ``ngb measure`` and ``ngb.measure`` run, built from their checked arguments.

Both surfaces read their arguments their own way (click options, Python values) and name them
their own way in an error (``--accuracy``, ``accuracy``); the trial itself is built and checked
here only, so the same arguments give the same ``TrialSpec`` -- and the same key, the same
stored point -- from the command line and from a notebook.
"""

from __future__ import annotations

from collections.abc import Mapping

from ngb.core.records.types import TrialSpec
from ngb.sweeps.spec.checks import check_accuracy_data, check_trial, parse_measure


def one_trial(
    *,
    model: str,
    compiler: str,
    batch: int,
    depth: int,
    width: int | None,
    optimisation: str,
    algorithm: str,
    device: str,
    options: Mapping[str, object],
    settings: Mapping[str, object],
    source: Mapping[str, object] | None,
    input_size: int | None = None,
    settings_name: str,
    accuracy_name: str,
) -> TrialSpec:
    """The trial, under the sweep file's rules (int32 sizes, width/depth for blocks only, the
    compiler's options); ``settings``: ``MeasureSettings`` fields, named ``settings_name`` in an
    error; labelled data for the accuracy pass is loaded now (a missing file or a failing loader
    is one line before anything is measured), named ``accuracy_name``."""
    spec = TrialSpec(
        model=model,
        compiler=compiler,
        batch=batch,
        depth=depth,
        width=width,
        optimisation=optimisation,
        algorithm=algorithm,
        device=device,
        input_size=input_size,
        compiler_options=options,
        measure=parse_measure(settings, settings_name),
        source=source,
    )
    check_trial(spec, "measure")
    if spec.measure.accuracy is not None:
        check_accuracy_data(spec.measure.accuracy.data, accuracy_name)
    return spec
