# run 228: the T = 4 flush programs beside alone with parts of their step left out (BESIDE_PROBE, uncommitted)
set -o pipefail
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader
cd .scratch && source anchors_env.sh
timeout 200 python beside_probe.py 512,128 steady 4 2>&1 | tee $OUT/run228_beside_probe.log | grep -v "^\["
timeout 100 python beside_probe.py 512 steady 2 0,1,2,5 2>&1 | tee $OUT/run228_beside_probe_t2.log | grep -v "^\["
