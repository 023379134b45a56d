# run 256: on an H200 the standing (bench_replay T = 1, 4; bench_replay_t28); on an H100 the accuracy from the pool as made,
# with the anchors: bench_replay at T = 1 and 4, bs 8 and 64, steady and every slot flushing, and the bench's GPU test
export PYTHONUNBUFFERED=1 SSMDECODE_GIT_COMMIT=$(cat .scratch/head)
name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "GPU: $name"
if [[ "$name" == *H200* ]]; then
  timeout 280 bash benchmarks/run_gpu.sh bench_replay bench_replay_t28 > $OUT/run256_standing.log 2>&1; echo rc $?
  tail -6 $OUT/run256_standing.log
  for f in bench-replay bench-replay-t28; do echo "## $f"; grep "^| ssmdecode replay fast vs\|^| floor\|^| ssmdecode replay fast |\|flashinfer checkpointing_ssu monolith\|^### T\|^| vLLM output-only" $OUT/results/$f/bench-replay.md | grep -v "exact vs\|%\|ulps" | head -40; done
else
  REPLAY_TOKENS="1 4" REPLAY_BATCHES="8 64" REPLAY_LAWS="steady allflush" REPLAY_NAME=bench-replay-acc timeout 150 bash benchmarks/run_gpu.sh bench_replay > $OUT/run256_acc.log 2>&1; echo rc $?
  tail -3 $OUT/run256_acc.log
  awk '/^Accuracy against float64/,/^$/' $OUT/results/bench-replay-acc/bench-replay.md | head -5
  grep -A40 "^Accuracy against float64" $OUT/results/bench-replay-acc/bench-replay.md | grep "^| " | head -60
  PYTHONPATH=src timeout 60 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_cli_bench_replay.py 2>&1 | tail -2
fi
