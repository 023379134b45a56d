nvidia-smi --query-gpu=name --format=csv,noheader
( PYTHONPATH=$PWD/src:$PWD/.upstream SSMDECODE_UPSTREAM_REQUIRED=1 timeout 200 python -m pytest -q -p no:cacheprovider -m gpu -n 4 tests/test_replay_fast.py tests/test_compat_flashinfer.py tests/test_compat_vllm_replay.py > $OUT/pytest.log 2>&1; echo pytest rc $?; tail -3 $OUT/pytest.log )
SSMDECODE_GIT_COMMIT=$COMMIT REPLAY_TOKENS="3 4" REPLAY_BATCHES="8 64 128 512" REPLAY_NAME=bench-replay-t34 OUT=$OUT timeout 200 bash benchmarks/run_gpu.sh bench_replay | tail -2
grep -A12 "T = 4, steady" $OUT/results/bench-replay-t34/bench-replay.md | grep "floor\|fast\|vLLM\|flashinfer"
cd .scratch && source anchors_env.sh
timeout 150 python sweep36.py 3 64,128,512 steady shipped,shipped+DRAFTS_B_LATE=0,shipped,shipped+DRAFTS_B_LATE=0 > $OUT/sweep_t3.log 2>&1; echo sweep rc $?
grep -v "^\[" $OUT/sweep_t3.log | grep -v "intermediate\|two-kernel" | tail -20
