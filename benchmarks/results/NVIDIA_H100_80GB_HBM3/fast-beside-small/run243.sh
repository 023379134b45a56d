# run 243: H200 -> the standing (bench_replay, bench_replay_t28); H100 -> probes: the Grams' PDL, T = 3's flush at bs 16/32, T = 4 bs 8's laws
name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "GPU: $name"
export PYTHONUNBUFFERED=1 SSMDECODE_GIT_COMMIT=$(cat .scratch/head)
case "$name" in
  *H200*) timeout 400 bash benchmarks/run_gpu.sh bench_replay bench_replay_t28 > $OUT/run243_standing.log 2>&1; echo rc $?; tail -40 $OUT/run243_standing.log ;;
  *)
    cd .scratch && source anchors_env.sh && touch /tmp/mark
    timeout 150 python sweep36.py 4 64,128 steady shipped,shipped+GRAM_PDL=0,shipped+LATE_WAIT=0,shipped > $OUT/run243_pdl.log 2>&1; echo pdl rc $?
    grep -v "^\[" $OUT/run243_pdl.log | grep -v "intermediate\|two-kernel" | tail -24
    timeout 150 python sweep36.py 3 16,32 steady shipped,shipped+SPLIT_FROM_TOKENS=3,shipped+BESIDE_MIN_REQUESTS=16,shipped > $OUT/run243_t3.log 2>&1; echo t3 rc $?
    grep -v "^\[" $OUT/run243_t3.log | grep -v "intermediate\|two-kernel" | tail -24
    timeout 120 python sweep36.py 4 8 steady,noflush,allflush shipped > $OUT/run243_bs8.log 2>&1; echo bs8 rc $?
    grep -v "^\[" $OUT/run243_bs8.log | grep -v "intermediate\|two-kernel" | tail -24
    find . -maxdepth 1 -name "*.json" -newer /tmp/mark -exec cp {} $OUT/ \; ; ls $OUT ;;
esac
