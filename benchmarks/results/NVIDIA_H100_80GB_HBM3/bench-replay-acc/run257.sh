# run 257: the GPU tests of the flashinfer adapter's default route and of the bench's accuracy; on an H200 the standing first
export PYTHONUNBUFFERED=1 SSMDECODE_GIT_COMMIT=$(cat .scratch/head)
name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "GPU: $name"
if false; then  # (too little device time left for the standing this session)
  timeout 200 bash benchmarks/run_gpu.sh bench_replay bench_replay_t28 > $OUT/run257_standing.log 2>&1; echo rc $?
  tail -4 $OUT/run257_standing.log
  for f in bench-replay bench-replay-t28; do echo "## $f"; grep "^| ssmdecode replay fast vs\|^| floor\|^| ssmdecode replay fast |\|flashinfer checkpointing_ssu monolith\|^### T\|^| vLLM output-only" $OUT/results/$f/bench-replay.md | grep -v "exact vs\|%\|ulps" | head -40; done
fi
PYTHONPATH=src:.upstream SSMDECODE_UPSTREAM_REQUIRED=1 timeout 90 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_compat_flashinfer.py tests/test_cli_bench_replay.py 2>&1 | tee $OUT/run257_pytest.log | tail -3
