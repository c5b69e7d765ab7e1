"""The DLAS algorithm axis by name (issue 48): the valid forms of ``TrialSpec.algorithm`` and
their parse, apart from the rewrite itself (``ngb.core.models.algorithms``, which needs torch) so
the trial records can check a name without it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ngb.core.base.errors import ConfigError

DEFAULT = "default"
KINDS = ("default", "direct", "gemm", "sparse-csr", "sparse-bsr")
SPARSE = ("sparse-csr", "sparse-bsr")
DEFAULT_BLOCK = 4
VALID_FORMS = "default, direct, gemm, sparse-csr, sparse-bsr, sparse-bsr-B (B a block side 2-64)"
_BSR = re.compile(r"\Asparse-bsr(?:-([0-9]+))?\Z")


@dataclass(frozen=True)
class Algorithm:
    """A parsed algorithm name: its kind and, for block sparse, the block side."""

    name: str
    kind: str
    block: int | None = None


def parse(name: object) -> Algorithm:
    """Parse an algorithm name; anything else is a ``ConfigError`` listing the valid forms."""
    if not isinstance(name, str):
        raise ConfigError(f"algorithm must be a string; valid: {VALID_FORMS}")
    text = name.strip()
    if text in ("default", "direct", "gemm", "sparse-csr"):
        return Algorithm(text, text)
    match = _BSR.match(text)
    if match:
        block = int(match.group(1)) if match.group(1) else DEFAULT_BLOCK
        if not 2 <= block <= 64:
            raise ConfigError(f"algorithm {name!r}: block side must be 2-64, got {block}")
        # one name per computation (and per trial key): sparse-bsr and sparse-bsr-04 are -4
        return Algorithm(f"sparse-bsr-{block}", "sparse-bsr", block)
    raise ConfigError(f"unknown algorithm {name!r}; valid: {VALID_FORMS}")
