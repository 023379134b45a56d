cd .scratch && source anchors_env.sh
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 150 python bits_knob.py 2,3,4 64,512 steady,allflush DRAFTS_AHEAD 0,1,2 2>&1 | grep "^bits"
timeout 100 python bits_knob.py 8 64,512 steady,allflush TILES_COLS_INPUTS_AHEAD 0,1 2>&1 | grep "^bits"
timeout 300 python sweep36.py 4 64,128,512 steady shipped+DRAFTS_AHEAD=0,shipped+DRAFTS_AHEAD=1,shipped+DRAFTS_AHEAD=2,shipped+DRAFTS_AHEAD=0,shipped+DRAFTS_AHEAD=1,shipped+DRAFTS_AHEAD=2 > $OUT/sweep_t4.log 2>&1; echo sweep rc $?
grep -v "^\[" $OUT/sweep_t4.log | grep -v "intermediate\|two-kernel" | tail -30
timeout 300 python sweep36.py 8 64,128,512 steady shipped+TILES_COLS_INPUTS_AHEAD=0,shipped+TILES_COLS_INPUTS_AHEAD=1,shipped+TILES_COLS_INPUTS_AHEAD=0,shipped+TILES_COLS_INPUTS_AHEAD=1 > $OUT/sweep_t8.log 2>&1; echo sweep rc $?
grep -v "^\[" $OUT/sweep_t8.log | grep -v "intermediate\|two-kernel" | tail -30
timeout 200 python sweep36.py 4,8 512 noflush,allflush shipped+DRAFTS_AHEAD=0+TILES_COLS_INPUTS_AHEAD=0,shipped+DRAFTS_AHEAD=1+TILES_COLS_INPUTS_AHEAD=1,shipped+DRAFTS_AHEAD=2+TILES_COLS_INPUTS_AHEAD=1 > $OUT/sweep_nfaf.log 2>&1; echo sweep rc $?
grep -v "^\[" $OUT/sweep_nfaf.log | grep -v "intermediate\|two-kernel" | tail -30
timeout 150 python sweep36.py 2,3 64,512 steady shipped+DRAFTS_AHEAD=1,shipped+DRAFTS_AHEAD=2 > $OUT/sweep_t23.log 2>&1; echo sweep rc $?
grep -v "^\[" $OUT/sweep_t23.log | grep -v "intermediate\|two-kernel\|vLLM\|flashinfer" | tail -20
