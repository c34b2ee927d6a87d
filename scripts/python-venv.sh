#!/usr/bin/env bash
# Makes .venv/ (a virtual environment of Debian's /usr/bin/python3) with the pinned PyPI packages
# of python/requirements.txt: nanobind and scikit-build-core to build the extension, numpy,
# pytest and safetensors to test it. Idempotent: does nothing when .venv/ already holds exactly
# these pins (a stamp file records the requirements it was made from).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv"
REQ="$ROOT/python/requirements.txt"
STAMP="$VENV/.lockstep-requirements"

if [[ -x "$VENV/bin/python" && -f "$STAMP" ]] && cmp -s "$REQ" "$STAMP"; then
  exit 0
fi
echo "python-venv: installing python/requirements.txt into $VENV" >&2
[[ -x "$VENV/bin/python" ]] || /usr/bin/python3 -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --disable-pip-version-check -r "$REQ"
cp "$REQ" "$STAMP"
