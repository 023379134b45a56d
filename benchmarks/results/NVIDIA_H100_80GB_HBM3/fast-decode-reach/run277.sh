# run 277 (aac1b2b + SIDE_DECODE_MIN_REQUESTS 512 + the every-slot-flushing GPU test), trimmed to the device time
# left: the GPU tests of test_replay_fast, then the model at bs 384 with the flushes beside (128) and in the main grid (512)
export PYTHONUNBUFFERED=1 SSMDECODE_GIT_COMMIT=$(cat .scratch/head)+side512
nvidia-smi --query-gpu=name --format=csv,noheader
export PYTHONPATH=$PWD/src
timeout 100 python -m pytest -q -p no:cacheprovider tests/test_replay_fast.py -m gpu > $OUT/run277_tests.log 2>&1; echo "tests rc $?"; tail -3 $OUT/run277_tests.log
for v in 128 512; do timeout 45 python3 -c "
import sys; from ssmdecode.ops.selective_state_update import replay_fast as rf; rf.SIDE_DECODE_MIN_REQUESTS=$v
from ssmdecode.cli import main; sys.exit(main(['e2e','--preset','nemotron3-super','--tp','8','--replay','--config','table','--batch','384','--out','$OUT/e2e-bs384-side$v']))" > $OUT/run277_e2e_bs384_side$v.log 2>&1; echo "bs 384 SIDE_DECODE_MIN_REQUESTS=$v"; grep "^| replay fast\|^| table" $OUT/e2e-bs384-side$v/e2e.md; done
echo "end at $SECONDS s"
