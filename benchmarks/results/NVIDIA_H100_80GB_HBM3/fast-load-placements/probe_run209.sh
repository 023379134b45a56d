cd .scratch && source anchors_env.sh
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 60 python bits_knob.py 1 64,512 steady,allflush DECODE_B_LATE 0,1 2>&1 | grep "^bits"
timeout 60 python bits_knob.py 1 64,512 steady,allflush FLUSH_TOKEN_FIRST 0,1 2>&1 | grep "^bits"
timeout 100 python bits_knob.py 2,4,8 64,512 steady,allflush DRAFTS_B_LATE 0,1 2>&1 | grep "^bits"
timeout 60 python bits_knob.py 4 64,512 steady,allflush BESIDE_STORE_LAST 0,1 2>&1 | grep "^bits"
timeout 60 python bits_knob.py 8 64,512 steady,allflush TILES_GRAMS_FIRST 0,1 2>&1 | grep "^bits"
timeout 60 python bits_knob.py 3,4 8 steady,allflush TILES_FLUSH_B_REUSE 0,1 2>&1 | grep "^bits"
timeout 200 python sweep36.py 4 64,128,512 steady shipped,shipped+BESIDE_STORE_LAST=1,shipped+DRAFTS_B_LATE=1,shipped+DRAFTS_B_LATE=1+BESIDE_MAIN_REGISTERS=120,shipped > $OUT/sweep_t4.log 2>&1; echo sweep rc $?
grep -v "^\[" $OUT/sweep_t4.log | grep -v "intermediate\|two-kernel" | tail -30
timeout 150 python sweep36.py 1 64,128,512,1024 steady shipped,shipped+DECODE_B_LATE=1,shipped+FLUSH_TOKEN_FIRST=1,shipped > $OUT/sweep_t1.log 2>&1; echo sweep rc $?
grep -v "^\[" $OUT/sweep_t1.log | grep -v "intermediate\|two-kernel" | tail -30
