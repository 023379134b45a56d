# run 226: the small-batch T = 4 step (one kernel, tiles at (32,4)): the main kernel's configs and the flush programs beside at small batch
set -o pipefail
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader
cd .scratch && source anchors_env.sh
timeout 240 python sweep36.py 4 1,8 steady shipped,shipped@16:4:slot:evict,shipped@16:2:slot:evict,shipped@16:1:slot:evict,shipped@32:2:slot:evict,shipped@64:4:slot:evict,shipped+BESIDE_MIN_REQUESTS=1,shipped+BESIDE_MIN_REQUESTS=1@16:4:slot:evict,shipped > $OUT/run226_sweep_small.log 2>&1; echo sweep rc $?
grep -v "^\[" $OUT/run226_sweep_small.log | grep -v "intermediate\|two-kernel" | tail -30
timeout 150 python sweep36.py 4 64,128 steady shipped,shipped+GRAM_MIN_REQUESTS=1000000,shipped+LATE_WAIT=0,shipped > $OUT/run226_sweep_grams.log 2>&1; echo sweep rc $?
grep -v "^\[" $OUT/run226_sweep_grams.log | grep -v "intermediate\|two-kernel" | tail -20
