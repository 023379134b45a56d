# run 274 (aac1b2b): (a) from 128 requests, the decode step's flushes in the main grid's flush programs with the
# called own flush (ROLE 4 + TAKE) instead of beside (SIDE_DECODE_MIN_REQUESTS raised), capped and uncapped;
# (b) at 64-127, a smaller or larger TAKE now that the own flush is called
export PYTHONUNBUFFERED=1 SSMDECODE_GIT_COMMIT=$(cat .scratch/head)
ROOT=$PWD
nvidia-smi --query-gpu=name --format=csv,noheader
export PYTHONPATH=$ROOT/src
cd benchmarks/results/NVIDIA_H100_80GB_HBM3/fast-flush-beside && source $ROOT/.scratch/anchors_env.sh >/dev/null 2>&1
OUT=$OUT timeout 200 python sweep36.py 1 128,256 allflush,steady,noflush shipped,shipped+SIDE_DECODE_MIN_REQUESTS=100000,shipped+SIDE_DECODE_MIN_REQUESTS=100000+PROGRAMS_CAP_FROM=100000,shipped+SIDE_DECODE_MIN_REQUESTS=100000+PROGRAMS_TAKE=2,shipped > $OUT/run274_roles.log 2>&1
mv $OUT/sweep36_T1_*.json $OUT/run274_sweep36_T1_roles.json
grep "^allflush\|^steady\|^noflush" $OUT/run274_roles.log
OUT=$OUT timeout 150 python sweep36.py 1 64,127 allflush,steady,noflush shipped,shipped+PROGRAMS_TAKE=2,shipped+PROGRAMS_TAKE=3,shipped+PROGRAMS_TAKE=6,shipped > $OUT/run274_take.log 2>&1
mv $OUT/sweep36_T1_*.json $OUT/run274_sweep36_T1_take.json
grep "^allflush\|^steady\|^noflush" $OUT/run274_take.log
echo "end at $SECONDS s"
