#!/usr/bin/env bash
# run_python_package_tests.sh - installs the dilattn Python package from this repository into a
# fresh virtual environment (pip install ., which builds the C library with meson-python) and
# runs its pytest suite (tests/packages/python). Exits non-zero on any failure.
#
# Python: /usr/bin/python3 (Debian's, which sees python3-torch and python3-numpy) when present,
# else python3; override with PYTHON=... The venv uses --system-site-packages so Debian's
# torch and numpy are visible; pip fetches meson-python, meson and ninja for the build.
# Needs (Debian): python3-venv, python3-numpy, python3-pytest or pip access to pytest;
# python3-torch for the torch tests. With DILATTN_REQUIRE_TORCH=1 (CI) a missing torch is a
# failure, not a skip.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
python="${PYTHON:-}"
if [[ -z "$python" ]]; then
  if [[ -x /usr/bin/python3 ]]; then python=/usr/bin/python3; else python=python3; fi
fi
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

echo "== python package: $("$python" --version) at $python; venv in $work/venv"
"$python" -m venv --system-site-packages "$work/venv"
venv_python="$work/venv/bin/python"

if [[ "${DILATTN_REQUIRE_TORCH:-0}" == "1" ]] && ! "$venv_python" -c "import torch" 2>/dev/null; then
  echo "FAIL: DILATTN_REQUIRE_TORCH=1 but '$python' cannot import torch" \
       "(Debian: apt-get install python3-torch, with PYTHON=/usr/bin/python3)" >&2
  exit 1
fi
"$venv_python" -c "import numpy" 2>/dev/null || "$venv_python" -m pip install -q numpy
"$venv_python" -c "import pytest" 2>/dev/null || "$venv_python" -m pip install -q pytest

# DILATTN_PIP_SETUP_ARGS (meson -D options, spaces between) reach the package's meson setup
# (CI leaves out the cpu tables that only the C tests run: .ci/run).
setup_args=()
for a in ${DILATTN_PIP_SETUP_ARGS:-}; do setup_args+=("--config-settings=setup-args=$a"); done
echo "== pip install $repo ${setup_args[*]}"
"$venv_python" -m pip install -q --no-cache-dir "${setup_args[@]}" "$repo"

# Run from an empty directory so `import dilattn` can only find the installed package.
cd "$work"
"$venv_python" -m dilattn info
# The `dilattn` console script pip installed (pyproject.toml, [project.scripts]) runs the
# package's commands.
echo "== $work/venv/bin/dilattn --help"
"$work/venv/bin/dilattn" --help
"$work/venv/bin/dilattn" info >/dev/null
"$venv_python" -m pytest -p no:cacheprovider -q -rs "$repo/tests/packages/python"
