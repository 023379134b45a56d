export PYTHONUNBUFFERED=1 SSMDECODE_GIT_COMMIT=$(cat .scratch/head)
nvidia-smi --query-gpu=name --format=csv,noheader | head -1
ROOT=$PWD
(cd .scratch && source anchors_env.sh >/dev/null 2>&1; export PYTHONPATH=$ROOT/src${PYTHONPATH:+:$PYTHONPATH};
 OUT=$OUT timeout 75 python sweep36.py 2 8 steady shipped,shipped+RING_GROUPED=1+STATE_FIRST=1,shipped) 2>&1 | grep -v Warn | tail -20
