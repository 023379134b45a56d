cd .scratch && source anchors_env.sh
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 200 python sweep36.py 8 64,128,512 steady shipped,shipped+DRAFTS_B_LATE=1,shipped+TILES_GRAMS_FIRST=1,shipped > $OUT/sweep_t8.log 2>&1; echo sweep rc $?
grep -v "^\[" $OUT/sweep_t8.log | grep -v "intermediate\|two-kernel" | tail -30
timeout 100 python sweep36.py 3,4 8 steady shipped,shipped+TILES_FLUSH_B_REUSE=1,shipped > $OUT/sweep_b8.log 2>&1; echo sweep rc $?
grep -v "^\[" $OUT/sweep_b8.log | grep -v "intermediate\|two-kernel" | tail -30
timeout 120 python sweep36.py 2 8,64,512 steady shipped,shipped+DRAFTS_B_LATE=1,shipped,shipped+DRAFTS_B_LATE=1 > $OUT/sweep_t2.log 2>&1; echo sweep rc $?
grep -v "^\[" $OUT/sweep_t2.log | grep -v "intermediate\|two-kernel" | tail -30
