#!/bin/bash
# An upgrade measured on a GPU (docs/upgrades.md), in one bounded call (about 90 s on an H200): an A/A pair of
# environments (a virtual environment that sees this Python's packages through a .pth file: the same torch,
# nothing downloaded) and a knob pair (PYTORCH_NO_CUDA_MEMORY_CACHING=1 for the base side's workers only),
# each a `perfgate run --base-python / --base-env` of the rollout's eager case on CUDA.
#
#   OUT=/path/to/out [WHEELS=.whl] bash benchmarks/upgrade_gpu_pairs.sh
#
# Expected: aa.log "the environments differ in: nothing recorded (an A/A pair)", step_time `unchanged`,
# rc=0; knob.log "$PYTORCH_NO_CUDA_MEMORY_CACHING 1 -> none", the head (caching allocator on) a `win`.
set -u
: "${OUT:?set OUT to the folder for the results}"
export PYTHONUNBUFFERED=1
if [ -n "${WHEELS:-}" ]; then  # packages the machine's image lacks (pydantic, ...), as benchmarks/gpu_session.sh
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$WHEELS"/*.whl || exit 9
  export PYTHONPATH=/tmp/site:$PWD
else
  export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
fi
env_dir=/tmp/perfgate-aa-env
rm -rf "$env_dir"
python3 -m venv --without-pip "$env_dir" || exit 9
site=$("$env_dir/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
python3 -c "import sys; print('\n'.join(p for p in sys.path if p.endswith(('site-packages', 'dist-packages'))))" \
  > "$site/shared.pth"
{ date -u; nvidia-smi -L; python3 -c "import torch; print(torch.__version__, torch.version.cuda, torch.backends.cudnn.version())"; } \
  > "$OUT/env.txt" 2>&1
common=(-w operator_rollout -t eager --size smoke --device cuda --processes 3)
timeout 150 python3 -m perfgate run "${common[@]}" --base-python "$env_dir/bin/python" --gate --out "$OUT/aa" \
  > "$OUT/aa.log" 2>&1
echo "aa rc=$?" >> "$OUT/aa.log"
timeout 150 python3 -m perfgate run "${common[@]}" --base-env PYTORCH_NO_CUDA_MEMORY_CACHING=1 --out "$OUT/knob" \
  > "$OUT/knob.log" 2>&1
echo "knob rc=$?" >> "$OUT/knob.log"
for d in aa knob; do rm -rf "$OUT/$d/tb" "$OUT/$d/.work" "$OUT/$d/base/.work"; done
