# run 272: PROGRAMS_TAKE 4 shipped with the own flush called (_own_flush, alignment restated): the GPU suite, the
# decode step's bench at bs 64, 96, 127 under the three laws (floor and anchors in the same process), the take tests
export PYTHONUNBUFFERED=1 SSMDECODE_GIT_COMMIT=$(cat .scratch/head)
END=$((SECONDS + ${LIMIT:-540}))
left() { local l=$((END - SECONDS)); [ $l -lt $1 ] && echo $l || echo $1; }
name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "GPU: $name"
PYTHONPATH=$PWD/src timeout $(left 90) python -m pytest -q -p no:cacheprovider tests/test_replay_fast.py tests/test_compat_vllm_replay.py -k "take or aligned" > $OUT/run272_take_tests.log 2>&1; echo "take tests rc $?"; tail -1 $OUT/run272_take_tests.log
REPLAY_TOKENS=1 REPLAY_BATCHES="64 96 127" REPLAY_LAWS="steady noflush allflush" REPLAY_NAME=bench-replay-take-called \
  timeout $(left 150) bash benchmarks/run_gpu.sh bench_replay > $OUT/run272_bench.log 2>&1; echo "bench rc $?"
grep -E "^\| (bs|floor|read|ssmdecode replay fast|vLLM)" $OUT/results/bench-replay-take-called/bench-replay.md | head -30
TEST_WORKERS=4 timeout $(left 330) bash benchmarks/run_gpu.sh test > $OUT/run272_test.log 2>&1; echo "test rc $?"
grep -E "passed|failed" $OUT/run272_test.log | tail -4
echo "end at $SECONDS s"
