# run 253: on an H200 the standing (bench_replay T = 1, 4; bench_replay_t28); on an H100 the bs 8 flush's cost split
# (PROBE: the verify flush's store masked off, its math skipped, both) and the T = 4 bs 8 ncu profile
export PYTHONUNBUFFERED=1 SSMDECODE_GIT_COMMIT=$(cat .scratch/head)
END=$((SECONDS + ${LIMIT:-400}))
left() { local l=$((END - SECONDS)); [ $l -lt $1 ] && echo $l || echo $1; }
name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "GPU: $name"
ROOT=$PWD
if [[ "$name" == *H200* ]]; then
  timeout $(left 300) bash benchmarks/run_gpu.sh bench_replay bench_replay_t28 > $OUT/run253_standing.log 2>&1; echo rc $?
  tail -6 $OUT/run253_standing.log
  for f in bench-replay bench-replay-t28; do echo "## $f"; grep "^| ssmdecode replay fast vs\|^| floor\|^| ssmdecode replay fast |\|flashinfer checkpointing_ssu monolith\|^### T\|^| vLLM output-only" $OUT/results/$f/bench-replay.md | grep -v "exact vs\|%\|ulps" | head -40; done
else
(cd .scratch && source anchors_env.sh >/dev/null 2>&1; export PYTHONPATH=$ROOT/src${PYTHONPATH:+:$PYTHONPATH};
 OUT=$OUT timeout $(left 90) python sweep36.py 4 8 steady,allflush shipped,shipped+PROBE=1,shipped+PROBE=2,shipped+PROBE=3,shipped;
 OUT=$OUT timeout $(left 60) python sweep36.py 2 8 steady shipped,shipped+PROBE=1,shipped+PROBE=2,shipped+PROBE=3,shipped) > $OUT/run253_sweeps.log 2>&1
grep -v Warn $OUT/run253_sweeps.log | tail -40
LIMIT=$(left 200) bash .scratch/ncu_t4b8.sh
fi
echo "end at $SECONDS s"
