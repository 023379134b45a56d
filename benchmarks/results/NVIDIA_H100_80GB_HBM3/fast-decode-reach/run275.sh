# run 275 (aac1b2b): where do the main grid's flush programs with the called own flush (ROLE 4 + TAKE) stop beating
# the flushes beside (SIDE_DECODE from 128 requests)? bs 128-256, three laws; then the model at bs 128 both ways, twice
export PYTHONUNBUFFERED=1 SSMDECODE_GIT_COMMIT=$(cat .scratch/head)
ROOT=$PWD
nvidia-smi --query-gpu=name --format=csv,noheader
export PYTHONPATH=$ROOT/src
for v in 128 100000 128 100000; do timeout 60 python3 -c "
import sys; from ssmdecode.ops.selective_state_update import replay_fast as rf; rf.SIDE_DECODE_MIN_REQUESTS=$v
from ssmdecode.cli import main; sys.exit(main(['e2e','--preset','nemotron3-super','--tp','8','--replay','--config','table','--batch','128','--out','$OUT/e2e-side$v']))" > $OUT/run275_e2e_side$v.log 2>&1; echo "SIDE_DECODE_MIN_REQUESTS=$v"; grep "^| replay fast\|^| table" $OUT/e2e-side$v/e2e.md; done
cd benchmarks/results/NVIDIA_H100_80GB_HBM3/fast-flush-beside && source $ROOT/.scratch/anchors_env.sh >/dev/null 2>&1
OUT=$OUT timeout 220 python sweep36.py 1 128,160,192,224,256 allflush,steady,noflush shipped,shipped+SIDE_DECODE_MIN_REQUESTS=100000,shipped > $OUT/run275_roles.log 2>&1
mv $OUT/sweep36_T1_*.json $OUT/run275_sweep36_T1_roles.json
grep "^allflush\|^steady\|^noflush" $OUT/run275_roles.log
echo "end at $SECONDS s"
