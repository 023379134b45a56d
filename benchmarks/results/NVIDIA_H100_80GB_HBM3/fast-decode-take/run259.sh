# run 259 (next session): on an H200 the standing first (bench_replay T = 1, 4; bench_replay_t28); on either card then the
# decode step's every-slot-flushing weak case at bs 64 (ROLE 4: J = batch / PROGRAMS_SHARE flush programs a (rows, head),
# each taking its share of the flushing requests one after the other: 16 each where all 64 flush), as run-time knobs
export PYTHONUNBUFFERED=1 SSMDECODE_GIT_COMMIT=$(cat .scratch/head)
END=$((SECONDS + ${LIMIT:-420}))
left() { local l=$((END - SECONDS)); [ $l -lt $1 ] && echo $l || echo $1; }
name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "GPU: $name"
ROOT=$PWD
if [[ "$name" == *H200* ]]; then
  timeout $(left 230) bash benchmarks/run_gpu.sh bench_replay bench_replay_t28 > $OUT/run259_standing.log 2>&1; echo rc $?
  tail -4 $OUT/run259_standing.log
  for f in bench-replay bench-replay-t28; do echo "## $f"; grep "^| ssmdecode replay fast vs\|^| floor\|^| ssmdecode replay fast |\|flashinfer checkpointing_ssu monolith\|^### T\|^| vLLM output-only" $OUT/results/$f/bench-replay.md | grep -v "exact vs\|%\|ulps" | head -40; done
fi
(cd benchmarks/results/NVIDIA_H100_80GB_HBM3/fast-flush-beside && source $ROOT/.scratch/anchors_env.sh >/dev/null 2>&1; export PYTHONPATH=$ROOT/src${PYTHONPATH:+:$PYTHONPATH};
 OUT=$OUT timeout $(left 150) python sweep36.py 1 64,96 allflush,steady,noflush shipped,shipped+PROGRAMS_SHARE=8,shipped+PROGRAMS_SHARE=4,shipped+PROGRAMS_SHARE=2,shipped) > $OUT/run259_sweeps.log 2>&1
grep -v Warn $OUT/run259_sweeps.log | tail -60
echo "end at $SECONDS s"
