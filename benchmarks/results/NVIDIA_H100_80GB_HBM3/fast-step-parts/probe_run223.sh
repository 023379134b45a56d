# run 223: the shipped step taken apart at T = 1, 2 and 8 (parts_probe.py)
set -o pipefail
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader
cd .scratch && source anchors_env.sh
timeout 150 python parts_probe.py 512,1024 noflush,steady 1 2>&1 | tee $OUT/run223_parts_t1.log | grep -v "^\[" | tail -30
timeout 100 python parts_probe.py 512 noflush,steady 2 2>&1 | tee $OUT/run223_parts_t2.log | grep -v "^\[" | tail -20
timeout 100 python parts_probe.py 512 noflush,steady 8 2>&1 | tee $OUT/run223_parts_t8.log | grep -v "^\[" | tail -20
