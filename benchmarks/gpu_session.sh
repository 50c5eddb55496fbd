#!/bin/bash
# One bounded session on a lent GPU machine: the CUDA tests, the GPU check and the spread benchmark, every
# step under its own timeout, everything that comes back in at most 8 files under $OUT (a tarball of the
# run folders without traces). docs/gpu.md, "In one bounded call".
#
#   OUT=/path/to/out [WHEELS=.whl] [STEPS="tests check spread"] [CHECK_ARGS=...] bash benchmarks/gpu_session.sh
#
# WHEELS: a folder of wheels to install first (packages the machine's image lacks: pydantic, SQLAlchemy,
# Alembic and their dependencies on the 2026-11 images), into /tmp/site, put on PYTHONPATH.
set -u
: "${OUT:?set OUT to the folder for the results}"
STEPS=${STEPS:-"tests check spread"}
export PYTHONUNBUFFERED=1
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
if [ -n "${WHEELS:-}" ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$WHEELS"/*.whl || exit 9
  export PYTHONPATH=/tmp/site:$PWD
else
  export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
fi
{ date -u; nvidia-smi; python3 -c "import torch, sys; print(sys.version, torch.__version__, torch.version.cuda, torch.backends.cudnn.version(), torch.cuda.is_available())";
  python3 -c "import perfgate.model.results, perfgate.judging.compare; print('perfgate imports ok')"; nproc; } > "$OUT/env.txt" 2>&1
for step in $STEPS; do
  case $step in
    tests) timeout 90 python3 -m pytest -q -p no:cacheprovider -rs tests/test_toggles.py tests/test_gpu_clocks.py \
             tests/test_profiling.py tests/test_gpu_check.py -k "cuda or gpu or drift or damage or nvml" > "$OUT/tests.log" 2>&1
           echo "tests rc=$? at $(el)s" >> "$OUT/tests.log" ;;
    check) timeout 560 python3 benchmarks/gpu_check.py --out /tmp/gpu-check ${CHECK_ARGS:-} > "$OUT/gpu-check.log" 2>&1
           echo "gpu_check rc=$? at $(el)s" >> "$OUT/gpu-check.log"
           cp /tmp/gpu-check/gpu-check.json "$OUT/" 2>/dev/null ;;
    spread) timeout 240 python3 benchmarks/gpu_spread.py --processes 8 --seconds 2 --out "$OUT/gpu-spread.json" \
              > "$OUT/gpu-spread.log" 2>&1
            echo "gpu_spread rc=$? at $(el)s" >> "$OUT/gpu-spread.log" ;;
    *) echo "unknown step $step (valid: tests check spread)" >&2; exit 2 ;;
  esac
done
[ -d /tmp/gpu-check ] && tar czf "$OUT/gpu-check-runs.tgz" --exclude='*trace*' -C /tmp gpu-check
echo "gpu_session: $STEPS in $(el)s"
