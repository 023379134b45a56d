# run 230: the GPU suite on this tree (with the two prepared knobs' GPU tests), then the fast route's H100 table (T = 3, 4, 8)
name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "$name"
export PYTHONUNBUFFERED=1
SSMDECODE_GIT_COMMIT=$(cat .scratch/head) timeout 300 bash benchmarks/run_gpu.sh test > $OUT/run230_test.log 2>&1; echo test rc $?
grep -E "passed|failed|FAILED|Error" $OUT/run230_test.log | tail -15
mkdir -p $OUT/configs && cp -r src/ssmdecode/configs/. $OUT/configs/
for toks in 4 "3 8"; do
  PYTHONPATH=src timeout 200 python3 -m ssmdecode tune --preset nemotron3-super --tp 8 --mode replay-fast --tokens $toks \
    --batch 1 8 16 64 128 512 1024 --config 32,4,slot,evict 32,2,slot,evict 16,4,slot,evict --leaders 2 \
    --out-dir $OUT/configs --out $OUT/tune-fast-t${toks// /} > $OUT/run230_tune_t${toks// /}.log 2>&1; echo tune $toks rc $?
done
tail -12 $OUT/run230_tune_t4.log; tail -12 $OUT/run230_tune_t38.log
