# run 273 (43cf99b, PROGRAMS_TAKE 4 with the called own flush): the model at bs 8, 64, 512 and the greedy comparison
export PYTHONUNBUFFERED=1 SSMDECODE_GIT_COMMIT=$(cat .scratch/head)
nvidia-smi --query-gpu=name --format=csv,noheader | head -1
timeout 400 bash benchmarks/run_gpu.sh e2e_replay > $OUT/run273_e2e_replay.log 2>&1; echo "rc $?"
grep -E "^\| (replay|table|bs|batch)" $OUT/results/e2e-replay/e2e.md | head -12
tail -5 $OUT/results/e2e-replay-greedy/e2e-replay-greedy.md
echo "end at $SECONDS s"
