# run 298 (next session, any card): the two GPU tests session 41 could not run, then TILES_TMA timed
# against the plain loads where the whole-tile tiles kernel runs; e2e_step_prof.py once
export PYTHONUNBUFFERED=1 SSMDECODE_GIT_COMMIT=$(cat .scratch/head)
ROOT=$PWD
name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "GPU: $name"
PYTHONPATH=$PWD/src timeout 120 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_e2e_replay.py \
  "tests/test_replay_fast.py::test_gpu_tiles_state_through_a_tensor_descriptor" > $OUT/run298_pytest.log 2>&1
echo "pytest rc $?"; tail -3 $OUT/run298_pytest.log
( cd benchmarks/results/NVIDIA_H100_80GB_HBM3/fast-flush-beside && source $ROOT/.scratch/anchors_env.sh >/dev/null 2>&1
  V=shipped,shipped+TILES_TMA=1,shipped,shipped+TILES_TMA=1
  OUT=$OUT timeout 150 python sweep36.py 3,4,8 1,8 steady,allflush,noflush $V > $OUT/run298_tma.log 2>&1; echo "sweep rc $?"
  mv $OUT/sweep36_T3_4_8_*.json $OUT/run298_sweep36_tma.json
  grep "^steady\|^allflush\|^noflush" $OUT/run298_tma.log | grep -v "vLLM\|two-kernel\|intermediate" | cut -c1-100
  OUT=$OUT timeout 80 python sweep36.py 8 32 steady $V > $OUT/run298_tma32.log 2>&1; echo "sweep rc $?"
  mv $OUT/sweep36_T8_*.json $OUT/run298_sweep36_tma_T8_32.json
  grep "^steady" $OUT/run298_tma32.log | cut -c1-100 )
( cd benchmarks/results/NVIDIA_H100_80GB_HBM3/fast-flush-beside && source $ROOT/.scratch/anchors_env.sh >/dev/null 2>&1
  OUT=$OUT timeout 100 python sweep36.py 8 64,512 steady shipped,shipped+TILES_COLS_TMA=1,shipped > $OUT/run298_colstma.log 2>&1; echo "sweep rc $?"
  mv $OUT/sweep36_T8_*.json $OUT/run298_sweep36_colstma.json
  grep "^steady\|lushed\|rror" $OUT/run298_colstma.log | cut -c1-120 | head -20 )
PYTHONPATH=$PWD/src OUT=$OUT timeout 100 python3 benchmarks/results/NVIDIA_H100_80GB_HBM3/e2e-small-step/e2e_step_prof.py 8 "table;fast" > $OUT/run298_prof.log 2>&1; echo "prof rc $?"
grep -v "Warn\|_warn_once" $OUT/run298_prof.log | head
cd $OUT && tar czf /tmp/all.tgz . && rm -rf $OUT/* && mv /tmp/all.tgz $OUT/
echo "end at $SECONDS s"
