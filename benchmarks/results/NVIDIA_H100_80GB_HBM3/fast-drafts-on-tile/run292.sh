# run 292 (next session): on an H100, the draft-by-draft verify step's flushes onto the tile (DRAFTS_FLUSH_ON_TILE)
# against shipped, then T = 1 at bs 1024, and e2e_replay on HEAD
export PYTHONUNBUFFERED=1 SSMDECODE_GIT_COMMIT=$(cat .scratch/head)
ROOT=$PWD
name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "GPU: $name"
( cd benchmarks/results/NVIDIA_H100_80GB_HBM3/fast-flush-beside && source $ROOT/.scratch/anchors_env.sh >/dev/null 2>&1
  V=shipped,shipped+DRAFTS_FLUSH_ON_TILE=2,shipped
  OUT=$OUT timeout 150 python sweep36.py 2,4 8,12 steady,allflush $V > $OUT/run292_drafts.log 2>&1; echo "sweep rc $?"
  mv $OUT/sweep36_T2*.json $OUT/run292_sweep36_drafts_ontile.json
  grep "^steady\|^allflush" $OUT/run292_drafts.log | cut -c1-100
  OUT=$OUT timeout 120 python sweep36.py 1 1024 steady,allflush shipped,shipped+DECODE_FLUSH_ON_TILE=0,shipped > $OUT/run292_t1_1024.log 2>&1
  mv $OUT/sweep36_T1_*.json $OUT/run292_sweep36_T1_1024.json
  grep "^steady\|^allflush" $OUT/run292_t1_1024.log | cut -c1-100 )
timeout 250 bash benchmarks/run_gpu.sh e2e_replay > $OUT/run292_e2e.log 2>&1; echo "e2e rc $?"
grep "^|" $OUT/results/e2e-replay/e2e.md | cut -c1-160
cd $OUT && tar czf /tmp/all.tgz . && rm -rf $OUT/* && mv /tmp/all.tgz $OUT/
echo "end at $SECONDS s"
