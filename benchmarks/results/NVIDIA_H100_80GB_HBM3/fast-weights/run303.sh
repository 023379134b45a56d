# As run from the project root: .scratch/head held 5a48f0e, and .scratch/anchors_env.sh was ../NVIDIA_H200/fast-late-wait/anchors_env.sh
# (the anchors environment, which takes the root as its folder's parent).
# r305 lean: the WEIGHTS beside GPU test, then T = 4 and T = 2 timed (bs 64, 128, 512) with and without WEIGHTS
export PYTHONUNBUFFERED=1 SSMDECODE_GIT_COMMIT=$(cat .scratch/head)
ROOT=$PWD
name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "GPU: $name"
PYTHONPATH=$PWD/src timeout 100 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_replay_fast.py -k "precomputed_weights and beside" > $OUT/run_weights_pytest.log 2>&1
echo "pytest rc $? at $SECONDS s"; tail -2 $OUT/run_weights_pytest.log
( cd benchmarks/results/NVIDIA_H100_80GB_HBM3/fast-flush-beside && source $ROOT/.scratch/anchors_env.sh >/dev/null 2>&1
  OUT=$OUT timeout 150 python sweep36.py 4 64,128,512 steady shipped,shipped+WEIGHTS=1,shipped > $OUT/run_weights_t4.log 2>&1; echo "sweep T4 rc $? at $SECONDS s"
  grep "^steady" $OUT/run_weights_t4.log | grep -v "intermediate\|two-kernel" | cut -c1-110
  OUT=$OUT timeout 110 python sweep36.py 2 64,512 steady shipped,shipped+WEIGHTS=1,shipped > $OUT/run_weights_t2.log 2>&1; echo "sweep T2 rc $? at $SECONDS s"
  grep "^steady" $OUT/run_weights_t2.log | grep -v "intermediate\|two-kernel" | cut -c1-110 )
cd $OUT && tar czf /tmp/all.tgz . && rm -rf $OUT/* && mv /tmp/all.tgz $OUT/
echo "end at $SECONDS s"
