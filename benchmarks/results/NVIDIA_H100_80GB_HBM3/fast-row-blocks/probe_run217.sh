# run 217: the main kernel's row blocks a program (MAIN_ROW_BLOCKS, uncommitted on 41b4bf1) bit for bit, and the T = 4 main kernel's configs timed
set -o pipefail
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader
cd .scratch && source anchors_env.sh
timeout 150 python bits_knob.py 3,4 64,512 steady,noflush MAIN_ROW_BLOCKS 1,2 2>&1 | tee $OUT/run217_bits.log | grep "^bits\|Error\|error" | head -20
timeout 400 python sweep36.py 4 128,512 steady shipped,shipped@8:1:slot:evict,shipped+MAIN_ROW_BLOCKS=2@8:1:slot:evict:regs200,shipped+MAIN_ROW_BLOCKS=8@8:1:slot:evict:regs200,shipped+MAIN_ROW_BLOCKS=4+MAIN_ROWS_AHEAD=0@8:1:slot:evict:regs168,shipped+MAIN_ROW_BLOCKS=16@4:1:slot:evict:regs168,shipped@16:2:slot:evict,shipped > $OUT/run217_sweep_t4.log 2>&1; echo sweep rc $?
grep -v "^\[" $OUT/run217_sweep_t4.log | grep -v "intermediate\|two-kernel" | tail -24
