# As run from the project root on 5ee0ec1, .upstream/ carried (the sglang and vLLM mamba_ssm copies,
# the anchors' files), on the H100 of run 308, straight after it.
export PYTHONUNBUFFERED=1; nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw --format=csv
(PYTHONPATH=$PWD/src:$PWD/.upstream timeout 200 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_compat_upstream.py > $OUT/run309_compat.log 2>&1; echo "compat rc $?"; tail -5 $OUT/run309_compat.log)
ROOT=$PWD; cd benchmarks/results/NVIDIA_H100_80GB_HBM3/fast-flush-beside && source $ROOT/.scratch/anchors_env.sh >/dev/null 2>&1
OUT=$OUT timeout 150 python sweep36.py 4 512 steady shipped,shipped,shipped+BESIDE_PER_SM=3,shipped > $OUT/run309_t4.log 2>&1; echo "rc $?"
grep "^steady" $OUT/run309_t4.log | cut -c1-100; nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv
