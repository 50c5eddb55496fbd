#!/usr/bin/env bash
# The CPU smoke gate: exactly what the pull-request workflow's CPU job runs, and what
# tests/test_workflows.py runs locally with tiny settings, so the two cannot drift apart.
#
#   .ci/smoke-gate.sh [extra `perfgate run` arguments...]
#
# Environment (all optional):
#   PERFGATE_PYTHON   Python with perfgate installed             (default: python)
#   PERFGATE_SUITE    suite to run                               (default: smoke)
#   PERFGATE_OUT      run folder                                 (default: reports/ci-smoke)
#   PERFGATE_AGAINST  git ref to compare against in the same job (default: none: compare with baselines/)
#   PERFGATE_COMPILE_CACHE  compiler caches kept between runs    (default: none: every case compiles cold)
# Exit code: perfgate's own (0 pass, 1 gate failed, 2 usage, 3 infrastructure), or 3 when the run
# left no results.json or summary.md behind.
set -uo pipefail
cd "$(dirname "$0")/.."

python="${PERFGATE_PYTHON:-python}"
suite="${PERFGATE_SUITE:-smoke}"
out="${PERFGATE_OUT:-reports/ci-smoke}"
args=(run --suite "$suite" --gate --out "$out")
if [[ -n "${PERFGATE_AGAINST:-}" ]]; then
  args+=(--against "$PERFGATE_AGAINST")
fi
if [[ -n "${PERFGATE_COMPILE_CACHE:-}" ]]; then
  args+=(--compile-cache "$PERFGATE_COMPILE_CACHE")
fi

"$python" -m perfgate "${args[@]}" "$@"
status=$?

for f in results.json summary.md; do
  if [[ ! -s "$out/$f" && $status -le 1 ]]; then
    echo "smoke-gate: $out/$f is missing after a completed run" >&2
    exit 3
  fi
done
echo "smoke-gate: perfgate exited $status; outputs in $out"
exit "$status"
