#!/usr/bin/env bash
# Builds everything (library, CLI, examples, tests, benchmarks; Release, Ninja, ccache) into
# build/ after installing missing Debian packages, then runs the whole test suite with CTest.
# Exits non-zero when a package, the build or any test fails. Extra arguments go to ctest:
#
#   scripts/test.sh                 # everything
#   scripts/test.sh -L e2e          # only the CLI tests (labels: core ops ... e2e examples)
#
# Set LOCKSTEP_BUILD_DIR to build elsewhere; CMAKE_ARGS (space separated) adds cmake options.
# The Python package is built too (-DLOCKSTEP_PYTHON=ON, tests/python under pytest), in a virtual
# environment of Debian's python3 at .venv/ with python/requirements.txt's pinned PyPI packages
# (made or updated only when the pins change); CMAKE_ARGS with -DLOCKSTEP_PYTHON=OFF skips it.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${LOCKSTEP_BUILD_DIR:-$ROOT/build}"

"$ROOT/scripts/install-deps.sh"

python_args=()
if [[ " ${CMAKE_ARGS:-} " != *" -DLOCKSTEP_PYTHON=OFF "* ]]; then
  "$ROOT/scripts/python-venv.sh"
  python_args=(-DLOCKSTEP_PYTHON=ON "-DPython_EXECUTABLE=$ROOT/.venv/bin/python")
fi

# Reuse the generator of an existing build folder; a new one gets Ninja.
generator=()
[[ -f "$BUILD_DIR/CMakeCache.txt" ]] || generator=(-G Ninja)
# shellcheck disable=SC2086  # CMAKE_ARGS is a list of options on purpose
cmake -S "$ROOT" -B "$BUILD_DIR" "${generator[@]}" "${python_args[@]}" ${CMAKE_ARGS:-}
cmake --build "$BUILD_DIR"

ctest --test-dir "$BUILD_DIR" --output-on-failure -j2 "$@"
