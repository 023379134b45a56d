# source me: the anchors' loading environment, as benchmarks/run_gpu.sh's stage_bench_replay sets it
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
fi=$ROOT/.upstream/fi_ckpt site=/tmp/site
export SSMDECODE_ANCHORS=$ROOT/.upstream
python3 -m pip install -q --no-index --no-deps --upgrade --target "$site" "$fi"/whl/*.whl
cudart=$(find "$(python3 -c 'import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))')" -name 'libcudart.so.13*' 2> /dev/null | head -1)
[ -n "$cudart" ] && export LD_LIBRARY_PATH=$(dirname "$cudart")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export PYTHONPATH=$ROOT/src:$site TVM_FFI_DISABLE_TORCH_C_DLPACK=1
