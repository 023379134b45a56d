# run 222: the shipped T = 4 step taken apart (parts_probe.py), noflush and steady
set -o pipefail
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader
cd .scratch && source anchors_env.sh
timeout 300 python parts_probe.py 512,128 noflush,steady 2>&1 | tee $OUT/run222_parts.log | grep -v "^\[" | tail -40
