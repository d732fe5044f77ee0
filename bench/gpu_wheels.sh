#!/usr/bin/env bash
# Download, here (where PyPI is reachable), the wheels that bench/gpu_check.sh installs on a lent GPU machine, and
# check that what a device call carries stays under its 64 MiB.
#
# The lent machine (Python 3.12, x86-64, no network) has torch, transformers, accelerate, peft, pandas, pyarrow,
# fsspec, xxhash, sympy, pyyaml, rich and matplotlib, but no TRL, datasets or math-verify: this fetches those, with
# the dependencies the machine lacks, at the versions this checkout runs with (.venv; TRL's is checked against
# pyproject.toml's range), as py3 / cp312 manylinux wheels, into .whl/gpu_check/ (ignored by .gitignore's .whl/).
#
#   bash bench/gpu_wheels.sh                  # then carry .whl/gpu_check and run: bash bench/gpu_check.sh
#   GPU_EXTRA_WHEELS="pyarrow==24.0.0" bash bench/gpu_wheels.sh   # more wheels (here: if the machine's pyarrow is
#                                                                 # older than datasets needs; gpu_check.sh says so)
set -euo pipefail
cd "$(dirname "$0")/.."
DEST=${GPU_WHEELS:-.whl/gpu_check}
PY=${PYTHON:-.venv/bin/python}
LIMIT=$((64 * 1024 * 1024))

ver() { "$PY" -c "import importlib.metadata as m, sys; print(m.version(sys.argv[1]))" "$1"; }
trl=$(ver trl)
"$PY" - "$trl" <<'PY'
import re, sys, tomllib
from packaging.requirements import Requirement
deps = tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]
spec = next(Requirement(d) for d in deps if re.match(r"trl\b", d)).specifier
if sys.argv[1] not in spec:
    sys.exit(f"gpu_wheels: the installed trl {sys.argv[1]} is outside pyproject.toml's trl{spec}: reinstall .venv first")
print(f"gpu_wheels: trl {sys.argv[1]} (pyproject.toml: trl{spec})")
PY
PKGS=(
  "trl==$trl"
  "datasets==$(ver datasets)"
  "dill==$(ver dill)"                        # datasets' needs that the machine lacks
  "multiprocess==$(ver multiprocess)"
  "math-verify==$(ver math-verify)"          # the math reward (rlvr_div.rewards), with its parser
  "latex2sympy2_extended==$(ver latex2sympy2_extended)"
  "antlr4-python3-runtime==$(ver antlr4-python3-runtime)"
)
# shellcheck disable=SC2206
PKGS+=(${GPU_EXTRA_WHEELS:-})

mkdir -p "$DEST"
rm -f "$DEST"/*.whl  # one version of each: two stop the install there
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  -d "$DEST" "${PKGS[@]}"

# sizes: the wheels, and everything a device call carries (tracked files, untracked files git does not ignore, the
# wheels); over 64 MiB the call is refused
wheels=$(du -cb "$DEST"/*.whl | tail -1 | cut -f1)
tree=$(git ls-files -z --cached --others --exclude-standard | du -cb --files0-from=- 2>/dev/null | tail -1 | cut -f1)
mib() { awk -v b="$1" 'BEGIN { printf "%.2f MiB", b / 1048576 }'; }
echo "gpu_wheels: ${#PKGS[@]} wheels in $DEST:"
du -b "$DEST"/*.whl | sort -rn | while read -r size path; do printf '  %10s  %s\n' "$(mib "$size")" "$(basename "$path")"; done
echo "gpu_wheels: wheels $(mib "$wheels"); working tree that travels $(mib "$tree"); together $(mib $((wheels + tree))) (limit 64 MiB)"
status=0
if [ "$wheels" -gt "$LIMIT" ]; then
  echo "gpu_wheels: the wheels alone are over 64 MiB; drop, largest first (the machine may have them: pip show NAME there):"
  du -b "$DEST"/*.whl | sort -rn | head -5 | while read -r size path; do echo "  $(basename "$path") ($(mib "$size"))"; done
  status=1
fi
if [ $((wheels + tree)) -gt "$LIMIT" ]; then
  echo "gpu_wheels: over 64 MiB with the working tree; its largest folders (tracked or untracked, not ignored):"
  git ls-files -z --cached --others --exclude-standard | du -b --files0-from=- 2>/dev/null \
    | awk '{ n = split($2, p, "/"); d = (n > 3 ? p[1] "/" p[2] "/" p[3] : $2); s[d] += $1 } END { for (d in s) print s[d], d }' \
    | sort -rn | head -8 | while read -r size path; do printf '  %10s  %s\n' "$(mib "$size")" "$path"; done
  status=1
fi
exit $status
