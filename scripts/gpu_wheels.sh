#!/usr/bin/env bash
# Wheels for a lent device whose image has its own Python, torch and NumPy and no network (issue 47): run HERE,
# carry the folder with the device call, and scripts/gpu_setup.sh installs from it there.
#
#   bash scripts/gpu_wheels.sh [--dir DIR] [--python-version X.Y] [PACKAGE ...]
#
# Downloads each PACKAGE with its dependencies as binary wheels for CPython X.Y (default 3.12, the device
# image's) on manylinux x86_64 into DIR (default .gpu_wheels in the repository, ignored by git), then drops
# the wheels the image has its own of (numpy, torch, triton, nvidia-*, cuda-*): installing those would
# replace the image's CUDA build. Default packages: pyproject's run-time dependencies (scripts/gpu_deps.py
# --wheels: scipy h5py click tomli-w today) and the test runner pytest, and hatchling with editables (the build
# backend of `pip install -e .`). numba (the
# compiled kernels: without it generation falls back to solve_ivp and CPU rollouts to torch) and matplotlib
# (figures; no step draws one) are optional: name them when the image lacks them and the carry has room.
# Prints every wheel with its size and the total; exit status 1 when the total passes 64 MiB, what one device
# call carries (then name fewer packages: scripts/gpu_check.sh --only env says which the image lacks).
# Measured for 3.12 (2026-11-24): the default set 40.9 MiB (scipy 1.18.1 alone 33.7); numba with llvmlite
# 60.6 MiB (a call of its own, on a machine kept warm); matplotlib with its dependencies 23.9 MiB.
set -euo pipefail
DIR="" PYV=3.12 PKGS=()
while [[ $# -gt 0 ]]; do
    case "$1" in
        --dir) DIR=$2; shift ;;
        --python-version) PYV=$2; shift ;;
        -h|--help) sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        -*) echo "gpu_wheels: unknown option $1 (use --dir, --python-version or -h)" >&2; exit 2 ;;
        *) PKGS+=("$1") ;;
    esac
    shift
done
REPO=$(cd "$(dirname "$0")/.." && pwd)
DIR=$(realpath -m "${DIR:-$REPO/.gpu_wheels}")
if [[ ${#PKGS[@]} -eq 0 ]]; then  # one list, pyproject's: the wheels cannot drift from the package's imports
    read -ra PKGS <<< "$(python "$REPO/scripts/gpu_deps.py" --wheels --python-version "$PYV")" || exit 1
fi
ABI="cp${PYV/./}"
mkdir -p "$DIR"
python -m pip download --progress-bar off --only-binary=:all: --python-version "$PYV" --implementation cp \
    --abi "$ABI" --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 -d "$DIR" "${PKGS[@]}" >&2
rm -f "$DIR"/numpy-*.whl "$DIR"/torch-*.whl "$DIR"/triton-*.whl "$DIR"/nvidia_*.whl "$DIR"/cuda_*.whl
total=0
for wheel in "$DIR"/*.whl; do
    size=$(stat -c %s "$wheel")
    total=$((total + size))
    awk -v s="$size" -v n="$(basename "$wheel")" 'BEGIN { printf "%8.1f MiB  %s\n", s / 1048576, n }'
done
awk -v s="$total" -v d="$DIR" 'BEGIN { printf "%8.1f MiB  in all, in %s\n", s / 1048576, d }'
if ((total > 64 * 1048576)); then
    echo "gpu_wheels: more than the 64 MiB a device call carries: name fewer packages (the image may have some:" \
         "scripts/gpu_check.sh --only env lists what it lacks)" >&2
    exit 1
fi
