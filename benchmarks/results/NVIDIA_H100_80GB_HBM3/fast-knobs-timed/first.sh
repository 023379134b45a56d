# the session's first call: on an H200, the route's standing (run_gpu.sh bench_replay bench_replay_t28); on an H100, run 229's knob timings
name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "$name"
if [[ $name == *H200* ]]; then
  SSMDECODE_GIT_COMMIT=$(cat .scratch/head) bash benchmarks/run_gpu.sh bench_replay bench_replay_t28
else
  bash .scratch/probe229.sh
fi
