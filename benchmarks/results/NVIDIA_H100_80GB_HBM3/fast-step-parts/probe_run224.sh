# run 224: the flush programs beside from a list built on the device (BESIDE_LIST, uncommitted on ba4107a): bits, then timed
set -o pipefail
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader
cd .scratch && source anchors_env.sh
timeout 80 python bits_knob.py 2,4,8 512 steady,allflush BESIDE_LIST 0,1 2>&1 | tee $OUT/run224_bits.log | grep "^bits\|Error" | head -12
timeout 150 python sweep36.py 4 128,512 steady,noflush shipped,shipped+BESIDE_LIST=1,shipped,shipped+BESIDE_LIST=1 > $OUT/run224_sweep_t4.log 2>&1; echo sweep rc $?
grep -v "^\[" $OUT/run224_sweep_t4.log | grep -v "intermediate\|two-kernel" | tail -30
timeout 100 python sweep36.py 2,8 512 steady shipped,shipped+BESIDE_LIST=1,shipped > $OUT/run224_sweep_t28.log 2>&1; echo sweep rc $?
grep -v "^\[" $OUT/run224_sweep_t28.log | grep -v "intermediate\|two-kernel" | tail -12
