# run 271 (next session; apply .scratch/take-noinline-aligned.diff to the tree first: `git apply`): the own program's flush
# as a non-inlined function with its alignment restated (TAKE_NOINLINE, _own_flush's ALIGNED checked by the host).
# Run 270 (noinline without the alignment) removed the model's cost but lost most of the gain (ld.v4 59 against 68
# offline); offline this diff has 68 again. Does it keep both?
export PYTHONUNBUFFERED=1 SSMDECODE_GIT_COMMIT=$(cat .scratch/head)+take-noinline-aligned
ROOT=$PWD
nvidia-smi --query-gpu=name --format=csv,noheader
export PYTHONPATH=$ROOT/src
for v in "0 0" "4 1" "0 0" "4 1"; do set -- $v; timeout 60 python3 -c "
import sys; from ssmdecode.ops.selective_state_update import replay_fast as rf; rf.PROGRAMS_TAKE=$1; rf.TAKE_NOINLINE=bool($2)
from ssmdecode.cli import main; sys.exit(main(['e2e','--preset','nemotron3-super','--tp','8','--replay','--config','table','--batch','64','--out','$OUT/e2e-take$1-noinline$2']))" > $OUT/run271_e2e_take$1_noinline$2.log 2>&1; echo "TAKE=$1 NOINLINE=$2"; grep "^| replay fast" $OUT/e2e-take$1-noinline$2/e2e.md; done
(cd benchmarks/results/NVIDIA_H100_80GB_HBM3/fast-flush-beside && source $ROOT/.scratch/anchors_env.sh >/dev/null 2>&1
 OUT=$OUT timeout 150 python sweep36.py 1 64,96,127 allflush,steady,noflush shipped,shipped+PROGRAMS_TAKE=4+TAKE_NOINLINE=1,shipped > $OUT/run271_sweep.log 2>&1
 grep "^allflush\|^steady\|^noflush" $OUT/run271_sweep.log)
timeout 60 python3 -c "
import sys, pytest
from ssmdecode.ops.selective_state_update import replay_fast as rf; rf.TAKE_NOINLINE=True
sys.exit(pytest.main(['-q','-p','no:cacheprovider','tests/test_replay_fast.py','tests/test_compat_vllm_replay.py','-k','take']))" > $OUT/run271_tests.log 2>&1; echo "tests rc $?"; tail -1 $OUT/run271_tests.log
echo "end at $SECONDS s"
