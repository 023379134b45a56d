# run 260: the decode step's flush programs' count (ROLE 4, bs 64-127: J = batch / PROGRAMS_SHARE a (rows, head)) and
# the flush programs after the main kernel (ROLE 6, bs >= 128: SIDE_AFTER_PROGRAMS a (rows, head)), every slot flushing,
# steady and none flushing, the shipped value first and last
export PYTHONUNBUFFERED=1 SSMDECODE_GIT_COMMIT=$(cat .scratch/head)
END=$((SECONDS + ${LIMIT:-420}))
left() { local l=$((END - SECONDS)); [ $l -lt $1 ] && echo $l || echo $1; }
name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "GPU: $name"
ROOT=$PWD
if [[ "$name" == *H200* ]]; then
  timeout $(left 230) bash benchmarks/run_gpu.sh bench_replay bench_replay_t28 > $OUT/run260_standing.log 2>&1; echo rc $?
  tail -4 $OUT/run260_standing.log
fi
cd benchmarks/results/NVIDIA_H100_80GB_HBM3/fast-flush-beside && source $ROOT/.scratch/anchors_env.sh >/dev/null 2>&1
export PYTHONPATH=$ROOT/src${PYTHONPATH:+:$PYTHONPATH}
OUT=$OUT timeout $(left 200) python sweep36.py 1 64,80,96,112,127 allflush,steady,noflush shipped,shipped+PROGRAMS_SHARE=12,shipped+PROGRAMS_SHARE=8,shipped+PROGRAMS_SHARE=6,shipped > $OUT/run260_programs.log 2>&1
grep -v Warn $OUT/run260_programs.log | grep "^allflush\|^steady\|^noflush"
OUT=$OUT timeout $(left 150) python sweep36.py 1 128,256 allflush,steady,noflush shipped,shipped+SIDE_AFTER_PROGRAMS=16,shipped+SIDE_AFTER_PROGRAMS=32,shipped+SIDE_AFTER_PROGRAMS=0,shipped > $OUT/run260_after.log 2>&1
grep -v Warn $OUT/run260_after.log | grep "^allflush\|^steady\|^noflush"
echo "end at $SECONDS s"
