cd .scratch && source anchors_env.sh
timeout 300 python sweep36.py 4 128,512 steady,noflush shipped,shipped+BESIDE_MAIN_REGISTERS=112,shipped+BESIDE_MAIN_REGISTERS=104,shipped@32:2:slot:evict,shipped@64:4:slot:evict,shipped+LATE_WAIT=0,shipped > $OUT/sweep_t4.log 2>&1; echo sweep rc $?
grep -v "^\[" $OUT/sweep_t4.log | tail -40
for law in noflush steady; do
timeout 120 ncu --clock-control none --kernel-name regex:'_replay_fast_kernel|_gram_kernel' --launch-skip 3 --launch-count 3 \
  --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section SchedulerStats --section InstructionStats --section MemoryWorkloadAnalysis \
  --metrics dram__bytes_read.sum,dram__bytes_write.sum,smsp__inst_executed.sum \
  python ../benchmarks/results/NVIDIA_H200/fast-verify-flush/ncu25.py 4 512 $law > $OUT/ncu_t4_$law.txt 2>&1; echo ncu $law rc $?
grep -E "^  _|Duration|Registers Per|Achieved Occupancy|Theoretical Occupancy|DRAM Throughput|Issue Slots Busy|Issued Warp|No Eligible|Active Warps Per|Eligible Warps|Stall Long|Warp Cycles Per Issued|inst_executed.sum|dram__bytes" $OUT/ncu_t4_$law.txt
done
