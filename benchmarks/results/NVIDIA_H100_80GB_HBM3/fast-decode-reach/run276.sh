# run 276 (aac1b2b): the model with the decode step's flushes beside (SIDE_DECODE, the default from 128 requests)
# against the main grid's flush programs with the called own flush (ROLE 4 + TAKE), at bs 256 and 512 (and the
# split flush kernel at 512, SPLIT_DECODE's default from 512 without SIDE_DECODE)
export PYTHONUNBUFFERED=1 SSMDECODE_GIT_COMMIT=$(cat .scratch/head)
nvidia-smi --query-gpu=name --format=csv,noheader
export PYTHONPATH=$PWD/src
for v in "256 128 512" "256 100000 512" "256 128 512" "256 100000 512" "512 128 512" "512 100000 512" "512 100000 100000" "512 128 512" "512 100000 100000"; do
set -- $v; timeout 60 python3 -c "
import sys; from ssmdecode.ops.selective_state_update import replay_fast as rf; rf.SIDE_DECODE_MIN_REQUESTS=$2; rf.SPLIT_DECODE_MIN_REQUESTS=$3
from ssmdecode.cli import main; sys.exit(main(['e2e','--preset','nemotron3-super','--tp','8','--replay','--config','table','--batch','$1','--out','$OUT/e2e-bs$1-side$2-split$3']))" > $OUT/run276_e2e_bs$1_side$2_split$3.log 2>&1; echo "bs $1 SIDE_DECODE_MIN_REQUESTS=$2 SPLIT_DECODE_MIN_REQUESTS=$3"; grep "^| replay fast\|^| table" $OUT/e2e-bs$1-side$2-split$3/e2e.md; done
echo "end at $SECONDS s"
