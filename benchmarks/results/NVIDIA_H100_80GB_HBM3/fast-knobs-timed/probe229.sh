# run 229: time the two prepared knobs (BESIDE_IN_FIRST 8530acc, GRAMS_FIRST 10176cf): bits of BESIDE_IN_FIRST, then timed beside the anchors
set -o pipefail
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader
cd .scratch && source anchors_env.sh
timeout 60 python bits_knob.py 4,3 512 steady BESIDE_IN_FIRST 0,1,2 2>&1 | tee $OUT/run229_bits.log | grep "^bits\|Error" | head -8
timeout 300 python sweep36.py 4 64,128,512 steady shipped,shipped+GRAMS_FIRST=1,shipped+BESIDE_IN_FIRST=1,shipped+BESIDE_IN_FIRST=2,shipped+GRAMS_FIRST=1+BESIDE_IN_FIRST=1,shipped > $OUT/run229_sweep_t4.log 2>&1; echo sweep rc $?
grep -v "^\[" $OUT/run229_sweep_t4.log | grep -v "intermediate\|two-kernel" | tail -24
timeout 150 python sweep36.py 1 512,1024 steady shipped,shipped+GRAMS_FIRST=1,shipped > $OUT/run229_sweep_t1.log 2>&1; echo sweep rc $?
grep -v "^\[" $OUT/run229_sweep_t1.log | grep -v "intermediate\|two-kernel" | tail -10
cd .. && timeout 150 python -m pytest -m gpu -q -p no:cacheprovider tests/test_replay_fast.py > $OUT/run229_pytest_gpu.log 2>&1; echo pytest rc $?
tail -5 $OUT/run229_pytest_gpu.log
