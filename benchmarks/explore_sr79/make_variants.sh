#!/bin/bash
# The variant trees of runs 79-83 under v/: old (c31585f's src/), and old with each patch
set -eu
cd "$(dirname "$0")"
rm -rf v && mkdir v
git -C ../.. archive c31585f src | tar -x -C v && mv v/src v/old
for p in patches/*.patch; do
  n=$(basename "$p" .patch)
  cp -r v/old "v/$n"
  if [ "$n" = new ]; then patch -s -p2 -d "v/$n" < "$p"; else patch -s -p1 -d "v/$n" < "$p"; fi
done
# run 79's low13: new, with the top 13 of the 16-bit half replaced by its low 13
cp -r v/new v/low13
sed -i 's/t = w + ((r >> 3) \& _below/t = w + ((r \& 0x1FFF) \& _below/' v/low13/ssmdecode/ops/selective_state_update/common.py
