# As run from the project root: .scratch/head held 5a48f0e, and .scratch/anchors_env.sh was ../NVIDIA_H200/fast-late-wait/anchors_env.sh
# (the anchors environment, which takes the root as its folder's parent).
# what a longer window costs (issue 28 item 1): bench-replay at window 16 and 32 in one call, T = 1 and 4, bs 64 and 512
# (the anchors are built for window 16 / a ring of 16; at 32 they report themselves unavailable). About 4 min.
export PYTHONUNBUFFERED=1 SSMDECODE_GIT_COMMIT=$(cat .scratch/head)
name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "GPU: $name"
( source .scratch/anchors_env.sh >/dev/null 2>&1
  for w in 16 32; do
    timeout 130 python3 -m ssmdecode bench-replay --window $w --tokens 1 4 --batch 64 512 --accuracy-batch 64 --out $OUT/window$w > $OUT/window$w.log 2>&1
    echo "window $w rc $? at $SECONDS s"
    grep "^| ssmdecode replay fast |\|^| floor\|^### T" $OUT/window$w/bench-replay.md | head -12
  done )
cd $OUT && tar czf /tmp/w.tgz . && rm -rf $OUT/* && mv /tmp/w.tgz $OUT/
echo "end at $SECONDS s"
