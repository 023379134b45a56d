# run 282: on an H200, the standing (bench_replay bench_replay_t28) then the GPU suite with the golden digests;
# on either card the whole-tile tiles flush onto the tile (TILES_FLUSH_ON_TILE) against shipped at bs 1 and 8
export PYTHONUNBUFFERED=1 SSMDECODE_GIT_COMMIT=$(cat .scratch/head)
ROOT=$PWD
name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "GPU: $name"
sweep() {
  ( cd benchmarks/results/NVIDIA_H100_80GB_HBM3/fast-flush-beside && source $ROOT/.scratch/anchors_env.sh >/dev/null 2>&1
    V=shipped,shipped+TILES_FLUSH_ON_TILE=1,shipped,shipped+TILES_FLUSH_ON_TILE=1
    OUT=$OUT timeout 150 python sweep36.py 4 1,8 steady,allflush,noflush $V > $OUT/run282_t4.log 2>&1
    mv $OUT/sweep36_T4_*.json $OUT/run282_sweep36_T4_ontile.json
    grep "^steady\|^allflush\|^noflush" $OUT/run282_t4.log
    OUT=$OUT timeout 150 python sweep36.py 3,8 1,8 steady,allflush $V > $OUT/run282_t38.log 2>&1
    mv $OUT/sweep36_T3*.json $OUT/run282_sweep36_T38_ontile.json
    grep "^steady\|^allflush" $OUT/run282_t38.log )
}
if echo "$name" | grep -q H200; then
  timeout 220 bash benchmarks/run_gpu.sh bench_replay bench_replay_t28 > $OUT/run282_standing.log 2>&1; echo "standing rc $?"
  for f in bench-replay bench-replay-t28; do echo "## $f"; grep "^| ssmdecode replay fast vs\|^| floor\|^| ssmdecode replay fast |\|flashinfer checkpointing_ssu monolith\|^### T\|^| vLLM output-only" $OUT/results/$f/bench-replay.md | grep -v "exact vs\|%\|ulps" | head -40; done
  TEST_WORKERS=4 timeout 300 bash benchmarks/run_gpu.sh test golden > $OUT/run282_test.log 2>&1; echo "test rc $?"
  grep -E "passed|failed|error|rc=" $OUT/run282_test.log | tail -8
else
  sweep
fi
echo "end at $SECONDS s"
