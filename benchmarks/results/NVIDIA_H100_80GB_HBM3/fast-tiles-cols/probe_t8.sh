cd .scratch && source anchors_env.sh
timeout 200 python sweep36.py 8 512 noflush,allflush shipped,shipped+BESIDE_TILES=1 > $OUT/sweep_nf_af.log 2>&1; echo sweep rc $?
grep -v "^\[" $OUT/sweep_nf_af.log | tail -20
for law in steady noflush; do
timeout 150 ncu --clock-control none --kernel-name regex:'_replay_fast_kernel|_gram_kernel' --launch-skip 2 --launch-count 3 \
  --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section InstructionStats --section MemoryWorkloadAnalysis \
  --metrics dram__bytes_read.sum,dram__bytes_write.sum,smsp__inst_executed.sum \
  python ncu25.py 8 512 $law > $OUT/ncu_t8_$law.txt 2>&1; echo ncu $law rc $?
grep -E "^  _|Duration|Registers Per|Achieved Occupancy|Theoretical Occupancy|DRAM Throughput|Executed Ipc A|inst_executed.sum|dram__bytes|Block Limit Reg|Dynamic Shared|Static Shared" $OUT/ncu_t8_$law.txt
done
