# run 255: the tiles' flush first (TFIRST, scratch knob) at bs 8, beside the shipped kernels and the anchors
export PYTHONUNBUFFERED=1 SSMDECODE_GIT_COMMIT=$(cat .scratch/head)
END=$((SECONDS + ${LIMIT:-200}))
left() { local l=$((END - SECONDS)); [ $l -lt $1 ] && echo $l || echo $1; }
name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "GPU: $name"
ROOT=$PWD
(cd .scratch && PYTHONPATH=$ROOT/src timeout $(left 40) python probe_check.py) 2>&1 | grep PROBE
(cd .scratch && source anchors_env.sh >/dev/null 2>&1; export PYTHONPATH=$ROOT/src${PYTHONPATH:+:$PYTHONPATH};
 OUT=$OUT timeout $(left 130) python sweep36.py 4 8 steady,allflush,noflush shipped,shipped+TFIRST=1,shipped+TFIRST=2,shipped+TFIRST=3,shipped+TFIRST=4,shipped+TFIRST=3@32:4:slot:evict,shipped+TFIRST=1@32:4:slot:evict,shipped;
 OUT=$OUT timeout $(left 60) python sweep36.py 3 8 steady shipped,shipped+TFIRST=3,shipped+TFIRST=4,shipped+TFIRST=3@32:4:slot:evict,shipped) > $OUT/run255_sweeps.log 2>&1
grep -v Warn $OUT/run255_sweeps.log | tail -70
echo "end at $SECONDS s"
