# run 221: the T = 4 main kernel's core alone (core_probe.py) beside the read-only stream and the shipped route, noflush
set -o pipefail
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader
cd .scratch && source anchors_env.sh
timeout 400 python core_probe.py 512,128 2>&1 | tee $OUT/run221_core.log | grep -v "^\[" | tail -40
