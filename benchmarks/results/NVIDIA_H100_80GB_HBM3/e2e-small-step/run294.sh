# run 294: the ring's L2 prefetch (PREFETCH_RING) at T = 1 and 4, small batches; the model step at
# bs 8 and 64 with replay_advance beside (ADVANCE_BESIDE) and the prefetch; then GPU tests with
# the prefetch on
export PYTHONUNBUFFERED=1 SSMDECODE_GIT_COMMIT=$(cat .scratch/head)
ROOT=$PWD
name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "GPU: $name"
( cd benchmarks/results/NVIDIA_H100_80GB_HBM3/fast-flush-beside && source $ROOT/.scratch/anchors_env.sh >/dev/null 2>&1
  V=shipped,shipped+PREFETCH_RING=1,shipped
  OUT=$OUT timeout 100 python sweep36.py 1 1,8,32 steady,noflush $V > $OUT/run294_t1.log 2>&1; echo "sweep rc $?"
  mv $OUT/sweep36_T1_*.json $OUT/run294_sweep36_T1_prefetch.json
  grep "^steady\|^noflush" $OUT/run294_t1.log | cut -c1-90
  OUT=$OUT timeout 80 python sweep36.py 4 1,8 steady $V > $OUT/run294_t4.log 2>&1; echo "sweep rc $?"
  mv $OUT/sweep36_T4_*.json $OUT/run294_sweep36_T4_prefetch.json
  grep "^steady" $OUT/run294_t4.log | cut -c1-90 )
PYTHONPATH=src timeout 200 python3 .scratch/e2e_prof9.py 8,64 "table;fast+ADVANCE_BESIDE=0;fast;fast+PREFETCH_RING=1;table" > $OUT/run294_prof9.log 2>&1; echo "prof rc $?"
grep -v "Warn\|_warn_once" $OUT/run294_prof9.log | cut -c1-140
sed -i 's/^PREFETCH_RING = False$/PREFETCH_RING = True/' src/ssmdecode/ops/selective_state_update/replay_fast.py
grep -n "^PREFETCH_RING = " src/ssmdecode/ops/selective_state_update/replay_fast.py
PYTHONPATH=$PWD/src:$PWD/.upstream SSMDECODE_UPSTREAM_REQUIRED=1 timeout 200 python3 -m pytest -q -m gpu -n 4 -p no:cacheprovider tests/test_replay_fast.py tests/test_compat_vllm_replay.py tests/test_models.py tests/test_e2e_replay.py > $OUT/run294_pytest.log 2>&1; echo "pytest rc $?"
tail -5 $OUT/run294_pytest.log
cd $OUT && tar czf /tmp/all.tgz . && rm -rf $OUT/* && mv /tmp/all.tgz $OUT/
echo "end at $SECONDS s"
