# run 242: the fast route's whole --space tune at T = 4 bs 64, 128 and T = 1 bs 512, 1024 (window 16), into tables of their own
name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "$name"
export PYTHONUNBUFFERED=1 SSMDECODE_GIT_COMMIT=$(cat .scratch/head)
mkdir -p $OUT/c4 $OUT/c1
PYTHONPATH=src timeout 240 python3 -m ssmdecode tune --preset nemotron3-super --tp 8 --mode replay-fast --tokens 4 --batch 64 128 \
  --space tune --leaders 3 --out-dir $OUT/c4 --out $OUT/t4 > $OUT/run242_t4.log 2>&1; echo tune t4 rc $?
tail -5 $OUT/run242_t4.log | cut -c1-220
PYTHONPATH=src timeout 120 python3 -m ssmdecode tune --preset nemotron3-super --tp 8 --mode replay-fast --tokens 1 --batch 512 1024 \
  --space tune --leaders 3 --out-dir $OUT/c1 --out $OUT/t1 > $OUT/run242_t1.log 2>&1; echo tune t1 rc $?
tail -5 $OUT/run242_t1.log | cut -c1-220
