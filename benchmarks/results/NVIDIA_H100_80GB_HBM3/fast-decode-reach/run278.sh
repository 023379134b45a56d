# run 278: the GPU suite on HEAD as it ships, then (the same call) on an H200 the standing
# (bench_replay bench_replay_t28), else run 279's part: the small verify step with its flushing
# requests beside in draft-by-draft flush programs (r279.sh)
export PYTHONUNBUFFERED=1 SSMDECODE_GIT_COMMIT=$(cat .scratch/head)
name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "GPU: $name"
START=$SECONDS
TEST_WORKERS=4 timeout 250 bash benchmarks/run_gpu.sh test > $OUT/run278_test.log 2>&1; echo "test rc $? in $((SECONDS - START)) s"
grep -E "passed|failed|error" $OUT/run278_test.log | tail -6
if echo "$name" | grep -q H200; then
  timeout $((440 - SECONDS)) bash benchmarks/run_gpu.sh bench_replay bench_replay_t28 > $OUT/run278_standing.log 2>&1; echo "standing rc $?"
  for f in bench-replay bench-replay-t28; do echo "## $f"; grep "^| ssmdecode replay fast vs\|^| floor\|^| ssmdecode replay fast |\|flashinfer checkpointing_ssu monolith\|^### T\|^| vLLM output-only" $OUT/results/$f/bench-replay.md | grep -v "exact vs\|%\|ulps" | head -40; done
  (cd $OUT && tar czf standing.tgz results/bench-replay results/bench-replay-t28)
else
  LIMIT=$((440 - SECONDS)) bash .scratch/r279.sh
fi
echo "end at $SECONDS s"
