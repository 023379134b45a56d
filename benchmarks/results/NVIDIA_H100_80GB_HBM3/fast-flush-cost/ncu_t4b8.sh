# T = 4 bs 8 under ncu, steady against noflush (the flushing programs' cost: 7.3 against 5.6 us on the H100)
export PYTHONPATH=$PWD/src
for law in steady noflush allflush; do
  timeout $(( ${LIMIT:-300} / 3 )) ncu --clock-control none --kernel-name regex:_selective_state_replay_fast_kernel --launch-skip 3 --launch-count 1 \
    --section SpeedOfLight --section WarpStateStats --section SourceCounters --section LaunchStats --section Occupancy \
    python .scratch/ncu_t4b8.py 4 8 $law > $OUT/ncu_t4b8_$law.txt 2>&1; echo "$law rc $?"
  grep -E "Duration|Warp Cycles Per Issued|Stall|Registers|Grid Size|Block Size" $OUT/ncu_t4b8_$law.txt | head -20
done
