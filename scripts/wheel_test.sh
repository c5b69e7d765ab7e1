#!/usr/bin/env bash
# Build the wheel, install it (no editable mapping) into a throwaway venv that reuses the project
# venv's packages, and run the fast tests against it from outside the checkout, so a module missing
# from the package list or package data fails here rather than on a user's machine.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${NGB_VENV:-.venv}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$VENV/bin/python" -m pip wheel -q --no-deps --no-build-isolation -w "$tmp/dist" .
"$VENV/bin/python" -m venv "$tmp/venv"
# The project venv's site-packages, minus the editable ngb, become visible through a .pth file.
site=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
tsite=$("$tmp/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
echo "$site" > "$tsite/ngb-deps.pth"
"$tmp/venv/bin/python" -m pip install -q --no-deps --no-index "$tmp"/dist/ngb-*.whl
mkdir -p "$tmp/run" && cp -r tests "$tmp/run/tests" && cp pyproject.toml requirements.lock "$tmp/run/"
mkdir -p "$tmp/run/core" "$tmp/run/devices" "$tmp/run/sweeps" "$tmp/run/tui"  # for the folder-list test
for d in core devices sweeps tui; do (cd "$d" && find . -name __init__.py -exec install -D /dev/null "$tmp/run/$d/{}" \;); done
cd "$tmp/run"
"$tmp/venv/bin/python" -c 'import ngb.core, sys; p = ngb.core.__file__; print("testing installed wheel:", p); sys.exit("site-packages" not in p)'
NGB_TEST_INSTALLED=1 PATH="$tmp/venv/bin:$PATH" "$tmp/venv/bin/python" -m pytest -m "not slow and not sshd" -q -p no:cacheprovider "$@"
