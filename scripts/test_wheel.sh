#!/usr/bin/env bash
# Install the release wheel into a fresh virtualenv that never saw the source tree and run the
# smoke suite there (tests/wheel_smoke.py): import, encode one chat per format family against
# transformers' ids, encode_batch, pickle, render, the console script. Records the wheel's size
# and import time in target/results/wheel.json.
# Usage: scripts/test_wheel.sh WHEEL_DIR DEV_PYTHON   (make test-wheel)
set -euo pipefail
wheel_dir="$1"
dev_python="$2"
wheels=("$wheel_dir"/chatids-*.whl)
[ "${#wheels[@]}" -eq 1 ] && [ -f "${wheels[0]}" ] || { echo "test_wheel: expected one wheel in $wheel_dir, found: ${wheels[*]}" >&2; exit 1; }
wheel="$(cd "$(dirname "${wheels[0]}")" && pwd)/$(basename "${wheels[0]}")"
smoke="$(pwd)/tests/wheel_smoke.py"
results="$(pwd)/target/results"
mkdir -p "$results"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cp "$smoke" "$work/"
"$dev_python" "$work/wheel_smoke.py" reference "$work/golden.json"

cd "$work"   # nothing of the source tree is importable from here
python3 -m venv "$work/venv"
"$work/venv/bin/python" -m pip install --quiet "$wheel"
"$work/venv/bin/python" wheel_smoke.py check golden.json

# Import time: median of 7 fresh interpreters.
import_ms="$("$work/venv/bin/python" - <<'PY'
import statistics, subprocess, sys, time
runs = []
for _ in range(7):
    t = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import chatids"], check=True)
    runs.append(time.perf_counter() - t)
base = []
for _ in range(7):
    t = time.perf_counter()
    subprocess.run([sys.executable, "-c", "pass"], check=True)
    base.append(time.perf_counter() - t)
print(f"{(statistics.median(runs) - statistics.median(base)) * 1000:.0f}")
PY
)"
size=$(stat -c %s "$wheel")
echo "test_wheel: $(basename "$wheel"): $((size / 1024)) KiB; import chatids adds ${import_ms} ms to a fresh interpreter (median of 7)"
printf '{"wheel": "%s", "bytes": %s, "import_ms": %s}\n' "$(basename "$wheel")" "$size" "$import_ms" > "$results/wheel.json"
