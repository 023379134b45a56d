# As run from the project root: .scratch/head held 5a48f0e, and .scratch/anchors_env.sh was ../NVIDIA_H200/fast-late-wait/anchors_env.sh
# (the anchors environment, which takes the root as its folder's parent).
# the H200 standing again (step 37's default at bs 8), then pytest -m gpu tests/test_replay_fast.py
export PYTHONUNBUFFERED=1 SSMDECODE_GIT_COMMIT=$(cat .scratch/head)
name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "GPU: $name"
timeout 240 bash benchmarks/run_gpu.sh bench_replay bench_replay_t28 > $OUT/standing.log 2>&1; echo "standing rc $?"
for f in bench-replay bench-replay-t28; do grep "vs flashinfer\|vs vllm\|^### T" $OUT/results/$f/bench-replay.md | head -12; done
PYTHONPATH=$PWD/src timeout 200 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_replay_fast.py tests/test_config.py > $OUT/pytest.log 2>&1; echo "pytest rc $?"; tail -2 $OUT/pytest.log
cd $OUT && tar czf /tmp/all.tgz . && rm -rf $OUT/* && mv /tmp/all.tgz $OUT/
echo "end at $SECONDS s"
