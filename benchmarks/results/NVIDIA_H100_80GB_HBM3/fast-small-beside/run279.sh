# run 279: the small verify step (bs 8, tiles) with its flushing requests beside in draft-by-draft
# flush programs of fewer rows (BESIDE_TILES_MIN_REQUESTS=1, BESIDE_FLUSH_TILES=0, b<R>x<W>), on HEAD + b8_ahead.diff
export PYTHONUNBUFFERED=1 SSMDECODE_GIT_COMMIT=$(cat .scratch/head)+b8_ahead
ROOT=$PWD
END=$((SECONDS + ${LIMIT:-560}))
left() { local l=$((END - SECONDS)); [ $l -lt $1 ] && echo $l || echo $1; }
name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "GPU: $name"
patch -p1 < .scratch/b8_ahead.diff || exit 1
K=BESIDE_TILES_MIN_REQUESTS=1+BESIDE_MIN_REQUESTS=1
cd benchmarks/results/NVIDIA_H100_80GB_HBM3/fast-flush-beside && source $ROOT/.scratch/anchors_env.sh >/dev/null 2>&1
OUT=$OUT timeout $(left 120) python sweep36.py 4 8 steady,allflush,noflush shipped,b16x1+$K,b16x2+$K,b32x2+$K,shipped > $OUT/run279_t4.log 2>&1
mv $OUT/sweep36_T4_*.json $OUT/run279_sweep36_T4_b8.json
grep "^steady\|^allflush\|^noflush" $OUT/run279_t4.log
OUT=$OUT timeout $(left 100) python sweep36.py 2,3,8 8 steady shipped,b16x1+$K,b32x2+$K,shipped > $OUT/run279_t238.log 2>&1
mv $OUT/sweep36_T2*.json $OUT/run279_sweep36_T238_b8.json
grep "^steady" $OUT/run279_t238.log
echo "end at $SECONDS s"
