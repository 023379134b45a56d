# session 32, run 237: on an H200, the route's standing (run_gpu.sh bench_replay bench_replay_t28); on an H100, the fast route's table re-tuned at window 16
name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "$name"
export PYTHONUNBUFFERED=1 SSMDECODE_GIT_COMMIT=$(cat .scratch/head)
if [[ $name == *H200* ]]; then
  bash benchmarks/run_gpu.sh bench_replay bench_replay_t28
else
  rm src/ssmdecode/configs/selective_state_update/NVIDIA_H100_80GB_HBM3.json
  mkdir -p $OUT/configs
  PYTHONPATH=src timeout 480 python3 -m ssmdecode tune --preset nemotron3-super --tp 8 --mode replay-fast --tokens 3 4 8 \
    --batch 1 8 16 64 128 512 1024 --config 32,4,slot,evict 32,2,slot,evict 16,4,slot,evict --leaders 2 \
    --out-dir $OUT/configs --out $OUT/tune-fast-w16 > $OUT/run237_tune.log 2>&1; echo tune rc $?
  tail -28 $OUT/run237_tune.log | cut -c1-200
  find $OUT -type f
fi
