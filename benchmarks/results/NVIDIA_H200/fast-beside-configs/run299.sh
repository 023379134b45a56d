# run 299: configs of the T = 8 and T = 4 steps at bs 128 and 512 (main kernel @R:W, flush programs beside bRxW)
export PYTHONUNBUFFERED=1 SSMDECODE_GIT_COMMIT=$(cat .scratch/head)
ROOT=$PWD
name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "GPU: $name"
cd benchmarks/results/NVIDIA_H100_80GB_HBM3/fast-flush-beside && source $ROOT/.scratch/anchors_env.sh >/dev/null 2>&1
OUT=$OUT timeout 260 python sweep36.py 8 128,512 steady shipped,shipped@64:8:slot:evict,shipped@128:8:slot:evict,b32x4,b64x8,b128x8,shipped > $OUT/run299_t8.log 2>&1; echo "sweep rc $?"
mv $OUT/sweep36_T8_*.json $OUT/run299_sweep36_t8.json
grep "^steady" $OUT/run299_t8.log | grep -v "intermediate\|two-kernel" | cut -c1-110
OUT=$OUT timeout 220 python sweep36.py 4 128,512 steady shipped,b32x4,b16x1,b32x2,b64x8,shipped@16:2:slot:evict,shipped > $OUT/run299_t4.log 2>&1; echo "sweep rc $?"
mv $OUT/sweep36_T4_*.json $OUT/run299_sweep36_t4.json
grep "^steady" $OUT/run299_t4.log | grep -v "intermediate\|two-kernel" | cut -c1-110
cd $OUT && tar czf /tmp/all.tgz . && rm -rf $OUT/* && mv /tmp/all.tgz $OUT/
echo "end at $SECONDS s"
