# run 225: the flush programs beside from the list, a few programs a (rows, head) (BESIDE_PROGRAMS, uncommitted): bits, then timed
set -o pipefail
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader
cd .scratch && source anchors_env.sh
timeout 90 python bits_knob.py 2,4 512 steady,allflush BESIDE_PROGRAMS 0,8 2>&1 | tee $OUT/run225_bits.log | grep "^bits\|Error" | head -12
timeout 300 python sweep36.py 4 512,128 steady,noflush shipped,shipped+BESIDE_PROGRAMS=8,b64x4+BESIDE_PROGRAMS=4,b64x4+BESIDE_PROGRAMS=8,b64x4+BESIDE_PROGRAMS=16,b64x4r168+BESIDE_PROGRAMS=8,b32x4r168+BESIDE_PROGRAMS=4,shipped > $OUT/run225_sweep_t4.log 2>&1; echo sweep rc $?
grep -v "^\[" $OUT/run225_sweep_t4.log | grep -v "intermediate\|two-kernel" | tail -40
