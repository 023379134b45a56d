# run 264 (c90d8d1, PROGRAMS_TAKE 4 the default): on an H200 the standing first; then the GPU suite, the decode step's
# bench at bs 64, 96, 127 under the three laws (the anchors in the same process), the -take tests on the GPU
export PYTHONUNBUFFERED=1 SSMDECODE_GIT_COMMIT=$(cat .scratch/head)
END=$((SECONDS + ${LIMIT:-420}))
left() { local l=$((END - SECONDS)); [ $l -lt $1 ] && echo $l || echo $1; }
name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "GPU: $name"
if [[ "$name" == *H200* ]]; then
  timeout $(left 230) bash benchmarks/run_gpu.sh bench_replay bench_replay_t28 > $OUT/run264_standing.log 2>&1; echo rc $?
  tail -4 $OUT/run264_standing.log
fi
TEST_WORKERS=4 timeout $(left 330) bash benchmarks/run_gpu.sh test > $OUT/run264_test.log 2>&1; echo "test rc $?"
grep -E "passed|failed" $OUT/run264_test.log | tail -4
REPLAY_TOKENS=1 REPLAY_BATCHES="64 96 127" REPLAY_LAWS="steady noflush allflush" REPLAY_NAME=bench-replay-take \
  timeout $(left 150) bash benchmarks/run_gpu.sh bench_replay > $OUT/run264_bench.log 2>&1; echo "bench rc $?"
grep -E "^\| (bs|floor|read|ssmdecode replay fast|vLLM)" $OUT/results/bench-replay-take/bench-replay.md | head -30
PYTHONPATH=$PWD/src timeout $(left 90) python -m pytest -q -p no:cacheprovider tests/test_replay_fast.py tests/test_compat_vllm_replay.py -k "take" > $OUT/run264_take_tests.log 2>&1; echo "take tests rc $?"; tail -1 $OUT/run264_take_tests.log
echo "end at $SECONDS s"
