# run 248: fe4f926's standing on the card: bench_replay (T = 1, 4), bench_replay_t28, and T = 2, 3, 4 at bs 8 16 32 64
name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "GPU: $name"
export PYTHONUNBUFFERED=1 SSMDECODE_GIT_COMMIT=$(cat .scratch/head)
timeout 200 bash benchmarks/run_gpu.sh bench_replay bench_replay_t28 > $OUT/run248_standing.log 2>&1; echo rc $?
REPLAY_TOKENS="2 3 4" REPLAY_BATCHES="8 16 32 64" REPLAY_NAME=bench-replay-t234-small timeout 120 bash benchmarks/run_gpu.sh bench_replay > $OUT/run248_small.log 2>&1; echo rc $?
for f in bench-replay bench-replay-t28 bench-replay-t234-small; do echo "## $f"; grep "^| ssmdecode replay fast vs\|^| floor\|^| ssmdecode replay fast |\|flashinfer checkpointing_ssu monolith\|^### T\|^| vLLM output-only" $OUT/results/$f/bench-replay.md | grep -v "exact vs\|%\|ulps" | head -40; done
