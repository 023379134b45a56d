#!/bin/bash
# exploration: SR store variants (common.py, decode.py), each benched against round-to-nearest in its own run
set -u
cd "$(dirname "$0")/../.."
R=$OUT/explore; mkdir -p "$R"
export PYTHONUNBUFFERED=1
for v in $VARIANTS; do
  n=${v//+/-}; d=/tmp/var/$n; rm -rf $d; mkdir -p $d; cp -r src $d/src
  for part in ${v//+/ }; do
    case $part in
      common_*) cp benchmarks/explore_sr/$part.py $d/src/ssmdecode/ops/selective_state_update/common.py ;;
      decode_*) cp benchmarks/explore_sr/$part.py $d/src/ssmdecode/ops/selective_state_update/decode.py ;;
    esac
  done
  for dt in ${DTYPES:-bfloat16 float16}; do
    PYTHONPATH=$d/src python3 -m ssmdecode bench --preset nemotron3-super --tp 8 --state-dtype $dt \
      --rounding nearest stochastic --batch ${BATCHES:-64 256 1024} --config ${CONFIGS:-table 8,1,slot,evict,ordered,regs64} \
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
