cd .scratch && source anchors_env.sh
timeout 120 python bits_knob.py 2,3,4 64,512 steady,allflush DRAFTS_AHEAD 2>&1 | grep -v Warn | tail -14
timeout 330 python sweep36.py 4 64,128,512 steady shipped+DRAFTS_AHEAD=0,shipped+DRAFTS_AHEAD=1,shipped+DRAFTS_AHEAD=0,shipped+DRAFTS_AHEAD=1 > $OUT/sweep_t4.log 2>&1; echo sweep rc $?
grep -v "^\[" $OUT/sweep_t4.log | tail -30
timeout 150 python sweep36.py 4 512 noflush,allflush shipped+DRAFTS_AHEAD=0,shipped+DRAFTS_AHEAD=1 > $OUT/sweep_t4nf.log 2>&1; echo sweep rc $?
grep -v "^\[" $OUT/sweep_t4nf.log | tail -30
timeout 200 python sweep36.py 2,3 8,64,128,512 steady shipped+DRAFTS_AHEAD=0,shipped+DRAFTS_AHEAD=1 > $OUT/sweep_t23.log 2>&1; echo sweep rc $?
grep -v "^\[" $OUT/sweep_t23.log | grep -v "intermediate\|two-kernel" | tail -40
