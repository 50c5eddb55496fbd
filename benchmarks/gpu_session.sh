#!/bin/bash
# One bounded session on a lent GPU machine: the CUDA tests, the GPU check and the spread benchmark, every
# step under its own timeout, everything that comes back in at most 8 files under $OUT (a tarball of the
# run folders without traces). docs/gpu.md, "In one bounded call".
#
#   OUT=/path/to/out [WHEELS=.whl] [STEPS="tests check spread"] [CHECK_ARGS=...] [EXTRA=file] bash benchmarks/gpu_session.sh
#
# STEPS may also name `coverage` (benchmarks/interval_coverage.py on CUDA: COVERAGE_ARGS, default 3 runs of the
# rollout and wave_field at pr, eager and amp-bf16, 12 s a case) and `extra`: every line of the file EXTRA is
# `NAME SECONDS COMMAND...`, run from the repository root under that timeout, its output in $OUT/extra.log.
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
    coverage) timeout "${COVERAGE_S:-240}" python3 benchmarks/interval_coverage.py --dir /tmp/gpu-coverage \
                --out "$OUT/gpu-coverage.json" ${COVERAGE_ARGS:---runs 3 -w operator_rollout -w wave_field -t eager \
                -t amp-bf16 --size pr --run-arg=--device=cuda --run-arg=--max-case-s=12} > "$OUT/gpu-coverage.log" 2>&1
              echo "interval_coverage rc=$? at $(el)s" >> "$OUT/gpu-coverage.log"
              # a run cut short by the timeout: analyse the runs that finished
              [ -f "$OUT/gpu-coverage.json" ] || python3 benchmarks/interval_coverage.py --out "$OUT/gpu-coverage.json" \
                --analyze /tmp/gpu-coverage/run-* >> "$OUT/gpu-coverage.log" 2>&1 ;;
    extra) : "${EXTRA:?set EXTRA to a file of NAME SECONDS COMMAND lines}"
           while read -r name secs cmd; do
             [ -z "$name" ] || [ "${name#\#}" != "$name" ] && continue
             echo "=== $name (timeout $secs s) at $(el)s: $cmd" >> "$OUT/extra.log"
             timeout "$secs" bash -c "$cmd" >> "$OUT/extra.log" 2>&1 < /dev/null
             echo "=== $name rc=$? at $(el)s" >> "$OUT/extra.log"
           done < "$EXTRA" ;;
    *) echo "unknown step $step (valid: tests check spread coverage extra)" >&2; exit 2 ;;
  esac
done
# the run folders, without traces, in one tarball (extra steps write theirs under /tmp/extra)
dirs=""; for d in gpu-check gpu-coverage extra; do [ -d "/tmp/$d" ] && dirs="$dirs $d"; done
[ -n "$dirs" ] && tar czf "$OUT/runs.tgz" --exclude='*trace*' --exclude='*.pt.trace.json*' --exclude='.work' -C /tmp $dirs
echo "gpu_session: $STEPS in $(el)s"
