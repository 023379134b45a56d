# As run from the project root on 5ee0ec1 (as run308.sh), carve.py then in .scratch/; run 311 followed on the same H100:
# PYTHONPATH=$PWD/src pytest -q -m gpu -p no:cacheprovider tests/test_replay_fast.py tests/test_config.py -x (../gpu-tests-5ee0ec1/run311_pytest.log).
export PYTHONUNBUFFERED=1 SSMDECODE_GIT_COMMIT=$(cat .scratch/head)
ROOT=$PWD; nvidia-smi --query-gpu=name --format=csv,noheader
cd benchmarks/results/NVIDIA_H100_80GB_HBM3/fast-flush-beside && source $ROOT/.scratch/anchors_env.sh >/dev/null 2>&1
V=shipped,shipped+CARVE=44,shipped+CARVE=100,shipped+CARVE=20,shipped+CARVE=100+BESIDE_PER_SM=2,shipped
OUT=$OUT timeout 200 python $ROOT/benchmarks/results/NVIDIA_H100_80GB_HBM3/fast-beside-cap/carve.py 4 128,512 steady,noflush $V > $OUT/run310_t4.log 2>&1; echo "T4 rc $? at $SECONDS s"
grep "^steady\|^noflush" $OUT/run310_t4.log | grep -v "intermediate\|two-kernel\|vLLM" | cut -c1-60
OUT=$OUT timeout 150 python $ROOT/benchmarks/results/NVIDIA_H100_80GB_HBM3/fast-beside-cap/carve.py 8,2 512 steady $V > $OUT/run310_t82.log 2>&1; echo "T8,2 rc $? at $SECONDS s"
grep "^steady" $OUT/run310_t82.log | grep -v "intermediate\|two-kernel\|vLLM" | cut -c1-60; tail -3 $OUT/run310_t82.log
OUT=$OUT timeout 100 python $ROOT/benchmarks/results/NVIDIA_H100_80GB_HBM3/fast-beside-cap/carve.py 1 128,512 steady shipped,shipped+CARVE=44,shipped+CARVE=100,shipped > $OUT/run310_t1.log 2>&1; echo "T1 rc $? at $SECONDS s"
grep "^steady" $OUT/run310_t1.log | grep -v "intermediate\|two-kernel\|vLLM\|flashinfer" | cut -c1-60
