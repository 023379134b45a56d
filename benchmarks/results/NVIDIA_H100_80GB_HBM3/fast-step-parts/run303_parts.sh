# As run from the project root: .scratch/head held 5a48f0e, and .scratch/anchors_env.sh was ../NVIDIA_H200/fast-late-wait/anchors_env.sh
# (the anchors environment, which takes the root as its folder's parent).
# the shipped step taken apart on the card (parts_probe.py): T = 4 and 8 at bs 512, steady and noflush
export PYTHONUNBUFFERED=1
name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "GPU: $name"
P=benchmarks/results/NVIDIA_H100_80GB_HBM3/fast-step-parts
( source .scratch/anchors_env.sh >/dev/null 2>&1
  timeout 110 python $P/parts_probe.py 512,128 noflush,steady 4 > $OUT/run306_parts_t4.log 2>&1; echo "t4 rc $?"
  timeout 90 python $P/parts_probe.py 512 noflush,steady 8 > $OUT/run306_parts_t8.log 2>&1; echo "t8 rc $?"
  grep -v "^\[" $OUT/run306_parts_t4.log $OUT/run306_parts_t8.log | tail -45 )
cd $OUT && tar czf /tmp/p.tgz . && rm -rf $OUT/* && mv /tmp/p.tgz $OUT/
echo "end at $SECONDS s"
