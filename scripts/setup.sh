#!/usr/bin/env bash
# Idempotent set-up for a fresh machine: Debian packages the tests need (openssh-server for the
# loopback sshd fixture, chromium for the HTML report check), a virtual environment in .venv with
# the pinned lock, and ngb installed editable. Re-running is cheap: it does nothing when the lock
# and pyproject are unchanged.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=${NGB_VENV:-.venv}
PY=${PYTHON:-python3}

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else
  echo "setup: need root to run: $*" >&2; return 1; fi; }

if ! command -v sshd >/dev/null 2>&1 && [ ! -x /usr/sbin/sshd ]; then
  echo "setup: installing openssh-server (Debian) for the sshd test fixture" >&2
  as_root apt-get update -qq
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq openssh-server >/dev/null
fi
# slurm-wlm + munge: the test fixture (tests/slurm.py) starts a one-machine Slurm cluster of its
# own (munged, slurmctld, slurmd under a temporary folder) for the Slurm device tests.
if ! command -v slurmctld >/dev/null 2>&1 && [ ! -x /usr/sbin/slurmctld ]; then
  echo "setup: installing slurm-wlm and munge (Debian) for the Slurm test fixture" >&2
  as_root apt-get update -qq
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq slurm-wlm munge >/dev/null
fi
# chromium opens the HTML report in the browser test (~300 MB, small beside the ~6 GB of wheels).
# Optional: where it cannot be installed the test skips, so a failure here does not stop set-up.
if ! command -v chromium >/dev/null 2>&1; then
  echo "setup: installing chromium (Debian) for the HTML report's browser test" >&2
  { as_root apt-get update -qq &&
    DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq chromium >/dev/null; } ||
    echo "setup: chromium not installed; the HTML browser test will be skipped" >&2
fi
# pdflatex compiles `ngb report all --format latex` on a two-column page in the LaTeX test
# (latex-recommended holds booktabs; without recommends: ~145 MB, 25 MB to download).
if ! command -v pdflatex >/dev/null 2>&1; then
  echo "setup: installing texlive-latex-base/-recommended (Debian) for the LaTeX table test" >&2
  { as_root apt-get update -qq &&
    DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq --no-install-recommends \
      texlive-latex-base texlive-latex-recommended >/dev/null; } ||
    echo "setup: pdflatex not installed; the LaTeX compile test will be skipped" >&2
fi

stamp="$VENV/.ngb-setup-stamp"
# the checkout's path is part of the stamp: an editable install pins absolute paths, so a venv
# copied from another clone is reinstalled here instead of testing that clone's sources
want="$({ pwd; cat requirements.lock pyproject.toml; } | sha256sum | cut -d' ' -f1)"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && [ -x "$VENV/bin/ngb" ]; then
  exit 0
fi

[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
echo "setup: installing pinned dependencies into $VENV (first time: a few minutes, ~6 GB)" >&2
"$VENV/bin/python" -m pip install -q --disable-pip-version-check -r requirements.lock
"$VENV/bin/python" -m pip install -q --disable-pip-version-check --no-deps --no-build-isolation -e .
# pip compiles the bytecode of the wheels it installs, but not of an editable checkout. Without
# it the first `make test` pays ~6 s (12 CPU-s) more: its four workers and their first agents and
# trial processes start together and each compiles the same sources before any has written the
# cache (2026-11-29). The links under ngb/ are skipped (compileall does not follow them): the
# folders themselves are listed.
"$VENV/bin/python" -m compileall -q -j 0 core devices sweeps tui ngb tests benchmarks examples >/dev/null
echo "$want" > "$stamp"
