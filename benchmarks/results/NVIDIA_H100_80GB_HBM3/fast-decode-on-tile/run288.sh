# run 288: the decode step's flushes onto the tile (DECODE_FLUSH_ON_TILE 1 and 2) against shipped at T = 1,
# then the GPU suite with the knob at 2 (the device's copy only)
export PYTHONUNBUFFERED=1 SSMDECODE_GIT_COMMIT=$(cat .scratch/head)
ROOT=$PWD
name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "GPU: $name"
( cd benchmarks/results/NVIDIA_H100_80GB_HBM3/fast-flush-beside && source $ROOT/.scratch/anchors_env.sh >/dev/null 2>&1
  V=shipped,shipped+DECODE_FLUSH_ON_TILE=1,shipped+DECODE_FLUSH_ON_TILE=2,shipped
  OUT=$OUT timeout 230 python sweep36.py 1 8,32,64,128,512 steady,allflush $V > $OUT/run288_t1.log 2>&1; echo "sweep rc $?"
  mv $OUT/sweep36_T1_*.json $OUT/run288_sweep36_T1_ontile.json
  grep "^steady\|^allflush" $OUT/run288_t1.log )
sed -i 's/^DECODE_FLUSH_ON_TILE = 0$/DECODE_FLUSH_ON_TILE = 2/' src/ssmdecode/ops/selective_state_update/replay_fast.py
grep -n "^DECODE_FLUSH_ON_TILE" src/ssmdecode/ops/selective_state_update/replay_fast.py
SSMDECODE_GIT_COMMIT=$(cat .scratch/head)+decode2 TEST_WORKERS=4 timeout 200 bash benchmarks/run_gpu.sh test > $OUT/run288_test.log 2>&1; echo "test rc $?"
grep -E "passed|failed" $OUT/results/test.log | tail -5
echo "end at $SECONDS s"
