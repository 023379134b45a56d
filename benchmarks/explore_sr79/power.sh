#!/bin/bash
# run 79: clock and power of RTN and SR back to back, per variant
set -u
cd "$(dirname "$0")/../.."
R=$OUT/power; mkdir -p $R
for n in $VARIANTS; do for dt in ${DTYPES:-float16}; do for r in nearest stochastic; do
  nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu,clocks_throttle_reasons.active --format=csv,noheader -lms 20 > $R/$n-$dt-$r.csv &
  S=$!
  PYTHONPATH=$PWD/benchmarks/explore_sr79/v/$n python3 benchmarks/explore_sr79/power.py $r $dt ${BATCH:-1024} ${SECONDS_RUN:-3}
  kill $S; sleep 0.3
  python3 - $R/$n-$dt-$r.csv "$n $dt $r" <<'PY'
import csv, sys
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) >= 5]
vals = [(int(r[1].split()[0]), float(r[2].split()[0])) for r in rows]
hot = [v for v in vals if v[1] > 300] or vals
sm = sorted(v[0] for v in hot); pw = sorted(v[1] for v in hot)
print(f"   {sys.argv[2]}: {len(hot)} busy samples; SM MHz median {sm[len(sm)//2]} min {sm[0]}; W median {pw[len(pw)//2]:.0f} max {pw[-1]:.0f}")
PY
done; done; done
