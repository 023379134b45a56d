# run 293: the e2e step's kernels at bs 8 (table against the fast route's T = 1 configs), the
# T = 2 bs 1, 8 entries re-tuned with DRAFTS_FLUSH_ON_TILE = 2, the GPU suite on it
export PYTHONUNBUFFERED=1 SSMDECODE_GIT_COMMIT=$(cat .scratch/head)
name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "GPU: $name"
key=$(echo "$name" | tr ' ' '_')
PYTHONPATH=src timeout 150 python3 .scratch/e2e_prof8.py 8 "default;16,2;16,1;32,4;64,4" > $OUT/prof8.log 2>&1; echo "prof rc $?"
grep -v "^  .*x[ ]*[0-9.]* min" $OUT/prof8.log | head -12; grep "select\|replay\|==" $OUT/prof8.log | cut -c1-150 | head -60
mkdir -p $OUT/configs/selective_state_update
cp src/ssmdecode/configs/selective_state_update/NVIDIA_H100_80GB_HBM3.json $OUT/configs/selective_state_update/
PYTHONPATH=src timeout 70 python3 -m ssmdecode tune --preset nemotron3-super --tp 8 --mode replay-fast --tokens 2 \
  --batch 1 8 --config 32,4,slot,evict 32,2,slot,evict 16,4,slot,evict --leaders 2 \
  --out-dir $OUT/configs --out $OUT/tune-fast-drafts-ontile > $OUT/tune.log 2>&1; echo tune rc $?
grep "^| headdim" $OUT/tune.log | cut -c1-220
TEST_WORKERS=4 timeout 300 bash benchmarks/run_gpu.sh test > $OUT/test.log 2>&1; echo "test rc $?"
grep -E "passed|failed|error|rc=" $OUT/test.log | tail -8
cd $OUT && tar czf /tmp/all.tgz . && rm -rf $OUT/* && mv /tmp/all.tgz $OUT/
echo "end at $SECONDS s"
