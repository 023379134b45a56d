#!/bin/bash
# run 79: each variant's fp16 bench with the SM clock, power and throttle reasons sampled every 50 ms
set -u
cd "$(dirname "$0")/../.."
R=$OUT/explore; mkdir -p "$R"
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm,clocks.max.mem --format=csv > $R/gpu.csv
for n in $VARIANTS; do
  nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active --format=csv -lms 50 > $R/smi-$n.csv &
  S=$!
  VARIANTS=$n DTYPES=float16 BATCHES="${BATCHES:-256 1024}" NOTAR=1 bash benchmarks/explore_sr79/run.sh
  kill $S
  python3 - $R/smi-$n.csv <<'PY'
import csv, sys, collections
rows = list(csv.reader(open(sys.argv[1])))[1:]
sm = [int(r[1].split()[0]) for r in rows if r[1].strip().split()[0].isdigit()]
pw = [float(r[3].split()[0]) for r in rows if r[3].strip().split()[0].replace('.','').isdigit()]
thr = collections.Counter(r[5].strip() for r in rows)
print(f"  samples {len(rows)} sm MHz min {min(sm)} median {sorted(sm)[len(sm)//2]} max {max(sm)}; power W max {max(pw):.0f} median {sorted(pw)[len(pw)//2]:.0f}; throttle {dict(thr)}")
PY
done
cat $R/gpu.csv
cd $OUT && tar czf explore.tgz explore && rm -rf explore
