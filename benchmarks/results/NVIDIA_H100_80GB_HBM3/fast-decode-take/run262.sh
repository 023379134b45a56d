# run 262: PROGRAMS_TAKE (a flush program in the main grid takes at most TAKE flushing requests; the later ranks flush
# in their own programs), T = 1 bs 64-127, every slot flushing / steady / none; then the CPU-listed test on the GPU
export PYTHONUNBUFFERED=1 SSMDECODE_GIT_COMMIT=$(cat .scratch/head)+take-prefilter
END=$((SECONDS + ${LIMIT:-420}))
left() { local l=$((END - SECONDS)); [ $l -lt $1 ] && echo $l || echo $1; }
name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "GPU: $name"
ROOT=$PWD
if [[ "$name" == *H200* ]]; then
  timeout $(left 230) bash benchmarks/run_gpu.sh bench_replay bench_replay_t28 > $OUT/run262_standing.log 2>&1; echo rc $?
  tail -4 $OUT/run262_standing.log
fi
(cd benchmarks/results/NVIDIA_H100_80GB_HBM3/fast-flush-beside && source $ROOT/.scratch/anchors_env.sh >/dev/null 2>&1
export PYTHONPATH=$ROOT/src${PYTHONPATH:+:$PYTHONPATH}
OUT=$OUT timeout $(left 220) python sweep36.py 1 64,96,127 allflush,steady,noflush shipped,shipped+PROGRAMS_TAKE=2,shipped+PROGRAMS_TAKE=4,shipped+PROGRAMS_TAKE=8,shipped+PROGRAMS_TAKE=4+PROGRAMS_SHARE=32,shipped > $OUT/run262_take.log 2>&1
mv $OUT/sweep36_T1_allflush_steady_noflush_6.json $OUT/run262_sweep36_T1_take.json
grep -v Warn $OUT/run262_take.log | grep "^allflush\|^steady\|^noflush")
PYTHONPATH=$ROOT/src timeout $(left 150) python -m pytest -q -p no:cacheprovider tests/test_replay_fast.py -k "shares_the_flushing or weights" > $OUT/run262_tests.log 2>&1; echo "tests rc $?"; tail -3 $OUT/run262_tests.log
PYTHONPATH=$ROOT/src timeout $(left 120) python -m pytest -q -p no:cacheprovider tests/test_compat_vllm_replay.py > $OUT/run262_tests_vllm.log 2>&1; echo "tests rc $?"; tail -3 $OUT/run262_tests_vllm.log
echo "end at $SECONDS s"
