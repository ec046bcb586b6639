#!/usr/bin/env bash
# Install the package on a lent device without touching the image's torch and NumPy, offline (issue 47):
#
#   bash scripts/gpu_setup.sh [--wheels DIR]          (DIR default .gpu_wheels: scripts/gpu_wheels.sh made it)
#
# 1. every dependency the image lacks (pyproject's, read by scripts/gpu_deps.py: scipy, h5py, click, tomli_w, and
#    pytest; numba, matplotlib when their wheels are in DIR) from DIR only: pip install --no-index --find-links DIR, with the image's torch and NumPy pinned as
#    constraints, so that nothing replaces them;
# 2. the package itself: pip install --no-index --find-links DIR --no-deps -e . (its build backend hatchling
#    from DIR); where that fails, scripts/gpu_check.sh still imports this checkout through PYTHONPATH;
# 3. says what is still missing. Exit status 1 when a required one is (all but numba and matplotlib); numba
#    (compiled kernels) and matplotlib (figures) are optional: the steps run without them.
# Safe to run again: what is there is kept. Environment: PYTHON (default python3, the image's Python with
# torch; else python).
set -u
WHEELS=""
while [[ $# -gt 0 ]]; do
    case "$1" in
        --wheels) WHEELS=$2; shift ;;
        -h|--help) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "gpu_setup: unknown argument $1 (use --wheels DIR or -h)" >&2; exit 2 ;;
    esac
    shift
done
REPO=$(cd "$(dirname "$0")/.." && pwd)
cd "$REPO" || exit 1
PY=${PYTHON:-python3}
[[ -n "${PYTHON:-}" ]] || command -v python3 >/dev/null || PY=python  # the device image's torch is python3's
WHEELS=$(realpath -m "${WHEELS:-$REPO/.gpu_wheels}")
# one list, pyproject's (scripts/gpu_deps.py): the set-up cannot drift from the package's imports
read -ra REQUIRED <<< "$("$PY" "$REPO/scripts/gpu_deps.py" --required)" || exit 1
read -ra OPTIONAL <<< "$("$PY" "$REPO/scripts/gpu_deps.py" --optional)" || exit 1

lacks() { ! "$PY" -c "import $1" >/dev/null 2>&1; }

pins=$(mktemp) && trap 'rm -f "$pins"' EXIT
"$PY" - >"$pins" <<'EOF'
import importlib.metadata as m
for name in ("numpy", "torch"):
    try:
        print(f"{name}=={m.version(name)}")
    except m.PackageNotFoundError:
        pass
EOF
echo "gpu_setup: kept as the image has them: $(paste -sd ' ' "$pins")"

want=()
for name in "${REQUIRED[@]}" "${OPTIONAL[@]}"; do
    if lacks "$name"; then
        if compgen -G "$WHEELS/${name}-*.whl" >/dev/null; then
            want+=("$name")
        else
            echo "gpu_setup: $name: not in the image, no wheel in $WHEELS"
        fi
    fi
done
if [[ ${#want[@]} -gt 0 ]]; then
    echo "gpu_setup: installing ${want[*]} from $WHEELS"
    "$PY" -m pip install --quiet --no-index --find-links "$WHEELS" -c "$pins" "${want[@]}" ||
        echo "gpu_setup: pip could not install ${want[*]} from $WHEELS"
fi

if "$PY" -m pip show vpintegrator 2>/dev/null | grep -q "^Editable project location: $REPO$"; then
    echo "gpu_setup: vpintegrator already installed, editable, from $REPO"
elif "$PY" -m pip install --quiet --no-index --find-links "$WHEELS" --no-deps -e "$REPO"; then
    echo "gpu_setup: vpintegrator installed, editable, from $REPO (--no-deps)"
else
    echo "gpu_setup: pip install -e . failed (no hatchling wheel in $WHEELS?): scripts/gpu_check.sh imports this" \
         "checkout through PYTHONPATH all the same"
fi

status=0
for name in "${REQUIRED[@]}"; do
    if lacks "$name"; then
        echo "gpu_setup: MISSING $name (required): bash scripts/gpu_wheels.sh $name here, then carry .gpu_wheels"
        status=1
    fi
done
for name in "${OPTIONAL[@]}"; do
    lacks "$name" && echo "gpu_setup: no $name (optional: $([[ $name == numba ]] &&
        echo "generation uses solve_ivp, CPU rollouts use torch" || echo "no figures; no step draws one"))"
done
PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}" "$PY" -c "import vpintegrator, torch, numpy
print(f'gpu_setup: vpintegrator {vpintegrator.__version__} ({vpintegrator.__file__}), torch {torch.__version__}, '
      f'NumPy {numpy.__version__}, CUDA available: {torch.cuda.is_available()}')" || status=1
exit $status
