# run 269: does PROGRAMS_TAKE = 64 (the branch present, never taken) cost the bench's steady step at bs 64 as it costs
# the model's (runs 266-268)? And the bench's kernel registers.
export PYTHONUNBUFFERED=1 SSMDECODE_GIT_COMMIT=$(cat .scratch/head)
ROOT=$PWD
nvidia-smi --query-gpu=name --format=csv,noheader
cd benchmarks/results/NVIDIA_H100_80GB_HBM3/fast-flush-beside && source $ROOT/.scratch/anchors_env.sh >/dev/null 2>&1
export PYTHONPATH=$ROOT/src${PYTHONPATH:+:$PYTHONPATH}
cp $ROOT/.scratch/regs_bench.py .
OUT=$OUT timeout 150 python regs_bench.py 1 64 steady,noflush shipped,shipped+PROGRAMS_TAKE=64,shipped,shipped+PROGRAMS_TAKE=64 2>&1 | grep -v Warn | grep "^steady\|^noflush\|kernel regs" | sort | uniq -c
rm regs_bench.py
