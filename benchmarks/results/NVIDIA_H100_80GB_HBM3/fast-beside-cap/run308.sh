# As run from the project root on 5ee0ec1 (.scratch/head held 5ee0ec1; .scratch/anchors_env.sh was
# ../NVIDIA_H200/fast-late-wait/anchors_env.sh). The knob it times, BESIDE_PER_SM, is in beside-per-sm-5ee0ec1.diff.
# BESIDE_PER_SM probe (any card; the H200 first if it comes): the GPU test, then the steady step with the flush programs beside capped at 1, 2, 3 a multiprocessor
export PYTHONUNBUFFERED=1 SSMDECODE_GIT_COMMIT=$(cat .scratch/head)
ROOT=$PWD
name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "GPU: $name"
PYTHONPATH=$PWD/src timeout 120 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_replay_fast.py -k "capped" > $OUT/run308_pytest.log 2>&1
echo "pytest rc $? at $SECONDS s"; tail -3 $OUT/run308_pytest.log
( cd benchmarks/results/NVIDIA_H100_80GB_HBM3/fast-flush-beside && source $ROOT/.scratch/anchors_env.sh >/dev/null 2>&1
  V=shipped,shipped+BESIDE_PER_SM=2,shipped+BESIDE_PER_SM=3,shipped+BESIDE_PER_SM=1,shipped
  OUT=$OUT timeout 200 python sweep36.py 4 128,512 steady,noflush $V > $OUT/run308_t4.log 2>&1; echo "T4 rc $? at $SECONDS s"
  grep "^steady\|^noflush" $OUT/run308_t4.log | grep -v "intermediate\|two-kernel\|vLLM" | cut -c1-100
  OUT=$OUT timeout 150 python sweep36.py 8,2 512 steady $V > $OUT/run308_t82.log 2>&1; echo "T8,2 rc $? at $SECONDS s"
  grep "^steady" $OUT/run308_t82.log | grep -v "intermediate\|two-kernel\|vLLM" | cut -c1-100 )
cd $OUT && tar czf /tmp/c.tgz . && rm -rf $OUT/* && mv /tmp/c.tgz $OUT/
echo "end at $SECONDS s"
