# run 238: bench-replay at T = 3 and 8, bs 8 16 64, with run 237's window-16 table, then with none (replay_fast_config)
export PYTHONUNBUFFERED=1 SSMDECODE_GIT_COMMIT=$(cat .scratch/head)
t=src/ssmdecode/configs/selective_state_update/NVIDIA_H100_80GB_HBM3.json
cp .scratch/table237.json $t
REPLAY_TOKENS="3 8" REPLAY_BATCHES="8 16 64" REPLAY_NAME=bench-replay-w16-table timeout 270 bash benchmarks/run_gpu.sh bench_replay > $OUT/run238.log 2>&1; echo rc $?
rm $t
REPLAY_TOKENS="3 8" REPLAY_BATCHES="8 16 64" REPLAY_NAME=bench-replay-w16-none timeout 270 bash benchmarks/run_gpu.sh bench_replay >> $OUT/run238.log 2>&1; echo rc $?
ls -R $OUT | head -30
