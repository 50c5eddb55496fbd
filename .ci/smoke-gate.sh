#!/usr/bin/env bash
# The CPU smoke gate: exactly what the pull-request workflow's CPU job runs, and what
# tests/test_workflows.py runs locally with tiny settings, so the two cannot drift apart.
#
#   .ci/smoke-gate.sh [extra `perfgate run` arguments...]
#
# It is also what the reusable action (action.yml) runs in a user's repository.
#
# Environment (all optional):
#   PERFGATE_WORKDIR  repository to run in                       (default: the one holding this script)
#   PERFGATE_PYTHON   Python with perfgate installed             (default: python)
#   PERFGATE_SUITE    suite to run                               (default: smoke; empty: default_suite)
#   PERFGATE_GATE     "false": report only, no --gate            (default: true)
#   PERFGATE_SHARD    run one shard, I/N                         (default: the whole suite)
#   PERFGATE_OUT      run folder                                 (default: reports/ci-smoke)
#   PERFGATE_AGAINST  git ref to compare against in the same job (default: none: compare with baselines/)
#   PERFGATE_COMPILE_CACHE  compiler caches kept between runs    (default: none: every case compiles cold)
#   PERFGATE_BASE_PYTHON  Python of the base side's environment  (default: none: both sides in this one)
# Exit code: perfgate's own (0 pass, 1 gate failed, 2 usage, 3 infrastructure), or 3 when the run
# left no results.json or summary.md behind.
set -uo pipefail
cd "${PERFGATE_WORKDIR:-$(dirname "$0")/..}" || exit 3

python="${PERFGATE_PYTHON:-python}"
suite="${PERFGATE_SUITE-smoke}"
out="${PERFGATE_OUT:-reports/ci-smoke}"
args=(run --out "$out")
if [[ -n "$suite" ]]; then
  args+=(--suite "$suite")
fi
case "${PERFGATE_GATE:-true}" in
  true) args+=(--gate) ;;
  false) ;;
  *) echo "smoke-gate: PERFGATE_GATE must be true or false, got '$PERFGATE_GATE'" >&2; exit 2 ;;
esac
if [[ -n "${PERFGATE_SHARD:-}" ]]; then
  args+=(--shard "$PERFGATE_SHARD")
fi
if [[ -n "${PERFGATE_AGAINST:-}" ]]; then
  args+=(--against "$PERFGATE_AGAINST")
fi
if [[ -n "${PERFGATE_COMPILE_CACHE:-}" ]]; then
  args+=(--compile-cache "$PERFGATE_COMPILE_CACHE")
fi
if [[ -n "${PERFGATE_BASE_PYTHON:-}" ]]; then
  args+=(--base-python "$PERFGATE_BASE_PYTHON")
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
