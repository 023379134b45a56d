# run 285: the fast route's H100 table re-tuned at bs 1 and 8 for T = 3, 4, 8 (the whole-tile tiles kernels,
# whose flush TILES_FLUSH_ON_TILE changed), merged into the shipped table
export PYTHONUNBUFFERED=1 SSMDECODE_GIT_COMMIT=$(cat .scratch/head)
name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "GPU: $name"
echo "$name" | grep -q H100 || { echo "not an H100: nothing planned"; exit 0; }
mkdir -p $OUT/configs/selective_state_update
cp src/ssmdecode/configs/selective_state_update/NVIDIA_H100_80GB_HBM3.json $OUT/configs/selective_state_update/
PYTHONPATH=src timeout 400 python3 -m ssmdecode tune --preset nemotron3-super --tp 8 --mode replay-fast --tokens 3 4 8 \
  --batch 1 8 --config 32,4,slot,evict 32,2,slot,evict 16,4,slot,evict --leaders 2 \
  --out-dir $OUT/configs --out $OUT/tune-fast-ontile > $OUT/run285_tune.log 2>&1; echo tune rc $?
tail -12 $OUT/run285_tune.log | cut -c1-250
echo "end at $SECONDS s"
