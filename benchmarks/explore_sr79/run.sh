#!/bin/bash
# run 79: the SR tests on the new tree, then each variant's stochastic store benched against RTN
set -u
cd "$(dirname "$0")/../.."
R=$OUT/explore; mkdir -p "$R"
export PYTHONUNBUFFERED=1
if [ -n "${TESTS:-}" ]; then
  PYTHONPATH=$PWD/src timeout 200 python3 -m pytest -q -p no:cacheprovider -x tests/test_stochastic_rounding.py > $R/sr_tests.log 2>&1; tail -3 $R/sr_tests.log
fi
for n in $VARIANTS; do
  d=$PWD/benchmarks/explore_sr79/v/$n
  for dt in ${DTYPES:-bfloat16 float16}; do
    PYTHONPATH=$d python3 -m ssmdecode bench --preset nemotron3-super --tp 8 --state-dtype $dt \
      --rounding nearest stochastic --batch ${BATCHES:-64 256 1024} --config ${CONFIGS:-table} \
      --out $R/$n-$dt > $R/$n-$dt.log 2>&1 || tail -5 $R/$n-$dt.log
    python3 - "$R/$n-$dt/bench.json" "$n $dt" <<'PY'
import json, sys
rows = json.load(open(sys.argv[1]))["rows"]
by = {(r["config"], r["batch"]): r for r in rows}
print(sys.argv[2])
for (c, b), r in sorted(by.items(), key=lambda kv: (kv[0][1], kv[0][0])):
    if c.endswith(" sr"):
        base = by[(c[:-3], b)]
        print(f"{c[:-3]:>32} bs{b:<5} rtn {base['us']:8.2f} sr {r['us']:8.2f} {(r['us']/base['us']-1)*100:+5.1f}%  "
              f"%ceil rtn {base['fraction_of_ceiling']*100:.1f} sr {r['fraction_of_ceiling']*100:.1f}")
PY
  done
done
[ -n "${NOTAR:-}" ] || (cd $OUT && tar czf explore.tgz explore && rm -rf explore)
