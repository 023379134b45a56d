#!/usr/bin/env bash
# Everything that needs the GPU, in one call: the GPU tests, the golden check against the
# upstream kernel's digests, and the measurements whose results are committed under
# benchmarks/results/<device_key>/. Each stage logs to $OUT/results/<stage>.log; the results
# folder is packed into $OUT/results.tgz (the device tool brings back few files); a table of
# stages, exit codes and times is printed last.
#
#   OUT=/tmp/run bash benchmarks/run_gpu.sh test golden tune sweep bench e2e verify
#
# Where the tree was copied without .git, set SSMDECODE_GIT_COMMIT to the commit it holds, so
# every report names it.
# Stages:
#   test    pytest -m gpu (every GPU-marked test)
#   golden  the 18 golden cases: ../shared/golden/check.py, or $GOLDEN/check.py
#   tune    ssmdecode tune, headline shape, into $OUT/results/configs (copy the table into
#           src/ssmdecode/configs/ to ship it)
#   tune_shapes  the same for dstate 64 and 256, head dim 128 and a bf16 state (SHAPES_LIST
#           narrows them), added to the shipped table (in $OUT/results/configs, and in the
#           package of this copy for the stages after it)
#   tune_shapes_small  the same for the shapes' bs 1 and 8 buckets only
#   sweep   ssmdecode sweep: every (BLOCK_M, warps) of the upstream grid at batch 8, 128, 512
#   bench   ssmdecode bench: the headline shape, upstream configs vs the table, 11 batches;
#           and the issue-4 shapes (dstate 64 and 256, head dim 128, bf16 state)
#   e2e     ssmdecode e2e at two presets, and the greedy identity check
#   verify  ssmdecode verify of the table against upstream (VERIFY_ARGS narrows the grid)
#   verify_all  the same for every key of the shipped table (headline and SHAPES_LIST)
#   bench_shapes  the issue-4 shapes of stage bench only
#   sweep_upstream  the MEASURING.md configs swept on the upstream kernels (`--kernel mamba_ssm`,
#           `--kernel sglang`, each when importable, e.g. from ./.upstream) and on ssmdecode's,
#           in the same run
#   verify_ordered  the ordered row sum: configs whose own layout changes the bits, on the
#           920-point grid at each issue-4 shape
#   explore benchmarks/explore.py: the current question (see stage_explore)
#   explore_pdl  programmatic dependent launch (pdl=True, each program letting the next kernel
#           launch first or last) against the plain launch, interleaved, with the pdl ceiling
#   bench_pdl  stage bench's headline run with --pdl
#   explore_slots  random, sorted and consecutive slots per call, interleaved: the gather's cost
#   explore_order  batch_order=slot_order(slots) against rows in order, interleaved
#   explore_model  e2e and bench of the same configs at bs 256 and 512 (grid order, hints)
#   explore_model_mid  e2e of the bs 8-128 entry (cache hints) against the same tile without
#           them
#   explore_regs  register caps (max_registers) against the compiler's choice, interleaved, at
#           the bf16 state and the headline
#   explore_packed  the state tile addressed from packed rows (compile-time offsets, the shipped
#           code) against its runtime strides, interleaved, at the headline, a bf16 state and
#           dstate 256
#   explore_lean  the vectors unmasked where the tile divides (_EVEN_VECTORS) on and off,
#           interleaved, at the headline
#   explore_lean_shapes  the same at dstate 64 and 256, head dim 128 and a bf16 state
#   explore_step_packed  the same A/B inside the model step (benchmarks/explore_step.py): step
#           time and the SSU's profiled time, packed rows on and off, interleaved
#   ncu_model  Nsight Compute over model steps with the L2 left as it is (benchmarks/ncu_model.py):
#           DRAM bytes per kernel with and without the cache hints, bs 512
#   explore_stream  benchmarks/explore_stream.py: a state stream without math, by layout of the
#           work, beside the kernel, on the same slots (random, sorted, consecutive, whole pages)
#   bench_order  stage bench's headline run with --slot-order
#   tune_order  ssmdecode tune --slot-order of the headline's large buckets into the shipped
#           table (copied to $OUT/results/configs and, for the stages after it, into the package
#           of this copy), then the headline bench, bench_order and verify with it
#   tune_model  ssmdecode tune of the headline's bs 256-1024 buckets without cache hints into
#           the shipped table (as tune_order), verify, and e2e against the previous entries
#   tune_steps  ssmdecode tune --in-model of the headline's bs 256-1024 buckets into the shipped
#           table (as tune_model), and verify
#   bench_headline  stage bench's headline run only
#   tune_in_model  ssmdecode tune --in-model of the headline's bs 64-512 buckets into a table of
#           its own (not shipped)
#   e2e_pdl  ssmdecode e2e of the headline with the table, with and without pdl=True
#   e2e_order  the same with and without batch_order=slot_order(slots) once per step
#   ncu     Nsight Compute (--clock-control none) on the table config and the ceiling's stream,
#           same bytes, at bs 8 and 512 (NCU_BATCHES; benchmarks/ncu_driver.py), with the
#           stall reasons per issued instruction
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/ssmdecode-gpu}
R=$OUT/results
mkdir -p "$R"
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
SSM=(python3 -m ssmdecode)
HEADLINE=(--preset nemotron3-super --tp 8)
# Tune candidates: the slot-major grid with cache hints, with the layout's row sum and with
# the ordered one (one warp: with more, the compiler transposes the whole tile for the ordered
# sum; see docs/performance.md), and the hints alone for small batches; 4 to 64 state
# elements a thread. The tuner adds upstream and default itself.
TUNE_CONFIGS=(2,1,slot,evict 2,2,slot,evict 4,1,slot,evict 4,2,slot,evict 8,1,slot,evict
              8,2,slot,evict 8,4,slot,evict 16,1,slot,evict 16,4,slot,evict 2,1,evict 4,1,evict
              2,1,slot,evict,ordered 4,1,slot,evict,ordered 8,1,slot,evict,ordered
              16,1,slot,evict,ordered)
BUCKETS=(1 2 4 8 16 32 64 128 256 512 1024)
UPSTREAM_BEST=(upstream default 4,1 8,2 16,4 16,8)

stage_test() {
  # the GPU tests, and the ordered row sum's and pdl's tests compiled for it
  python3 -m pytest -m gpu -q -p no:cacheprovider tests &&
  python3 -m pytest -q -p no:cacheprovider tests/test_ordered_sum.py tests/test_pdl.py \
      tests/test_batch_order.py
}
stage_golden() {
  local g=${GOLDEN:-../shared/golden}
  [ -f "$g/check.py" ] || g=.golden
  python3 "$g/check.py"
}
# A tune that adds to the shipped table starts from it in $R/configs; one whose table the
# later stages of the run should use puts it back into this copy's package.
tables_from_package() { mkdir -p "$R/configs" && cp -r src/ssmdecode/configs/. "$R/configs/"; }
tables_into_package() { cp -r "$R/configs/." src/ssmdecode/configs/; }
stage_tune() {
  # two halves, so a run cut short still leaves the first half's table
  "${SSM[@]}" tune "${HEADLINE[@]}" --config "${TUNE_CONFIGS[@]}" --batch 1 2 4 8 16 32 \
      --out-dir "$R/configs" --out "$R/tune-small" &&
  "${SSM[@]}" tune "${HEADLINE[@]}" --config "${TUNE_CONFIGS[@]}" --batch 64 128 256 512 1024 \
      --out-dir "$R/configs" --out "$R/tune-large"
}
# The issue-4 shapes beside the headline, each its own table key: the slot-major grid with
# hints in each identity class of these shapes' upstream configs (dstate 256: two warps across
# N; a 2-byte state: 4 elements a thread), and one-warp tiles with the ordered row sum, which
# keep the upstream bits in any layout; and (16,1,...) under register caps (run 32: with a bf16
# state, 88 registers instead of 100 give 23 warps an SM instead of 19, 1-2% at bs >= 128).
SHAPE_CONFIGS=(4,1,slot,evict 8,1,slot,evict 8,2,slot,evict 16,1,slot,evict 16,2,slot,evict
               16,4,slot,evict 4,4,slot,evict 8,8,slot,evict 8,8,evict 2,1,slot,evict,ordered
               4,1,slot,evict,ordered 8,1,slot,evict,ordered 16,1,slot,evict,ordered
               32,1,slot,evict,ordered 16,1,slot,evict,ordered,regs88
               16,1,slot,evict,ordered,regs96)
# SHAPES_LIST (';'-separated) narrows the shapes, e.g. SHAPES_LIST="--dstate 256".
IFS=';' read -ra SHAPES <<< "${SHAPES_LIST:---dstate 64;--dstate 256;--headdim 128;--state-dtype bfloat16}"
# tune_shapes_into_table NAME BATCH...: each shape of SHAPES tuned at these batches, added to the
# shipped table (in $R/configs, and in the package of this copy for the stages after it); its
# report in $R/NAME--<shape>
tune_shapes_into_table() {
  local name=$1 shape
  shift
  tables_from_package  # add to the shipped table
  for shape in "${SHAPES[@]}"; do
    # shellcheck disable=SC2086
    "${SSM[@]}" tune "${HEADLINE[@]}" $shape --config "${SHAPE_CONFIGS[@]}" --batch "$@" \
        --leaders 2 --rounds 2 --out-dir "$R/configs" --out "$R/$name${shape// /}" || return
  done
  tables_into_package  # the later stages of the run use the new keys
}
stage_tune_shapes() { tune_shapes_into_table tune 1 8 64 256 1024; }
stage_tune_shapes_small() {
  # the shapes' bs 1 and 8 buckets only (SHAPES_LIST narrows the shapes): the unmasked vectors
  # (f3dc460) made head dim 128's and dstate 256's bs-8 entries 2-3% slower and upstream's
  # configs faster (run 54)
  tune_shapes_into_table tune-small 1 8
}
stage_sweep() { "${SSM[@]}" sweep "${HEADLINE[@]}" --space basic --batch 8 128 512 --out "$R/sweep"; }
stage_bench() {
  stage_bench_headline && stage_bench_shapes
}
stage_bench_headline() {
  "${SSM[@]}" bench "${HEADLINE[@]}" --batch "${BUCKETS[@]}" --config "${UPSTREAM_BEST[@]}" table \
      --out "$R/bench"
}
stage_bench_shapes() {
  local shape
  for shape in "${SHAPES[@]}"; do
    # shellcheck disable=SC2086
    "${SSM[@]}" bench "${HEADLINE[@]}" $shape --batch 8 128 256 512 1024 \
        --config upstream default table --out "$R/bench-${shape// /}" || return
  done
}
stage_e2e() {
  "${SSM[@]}" e2e "${HEADLINE[@]}" --batch 8 64 128 256 512 --out "$R/e2e-nemotron3-super-tp8" &&
  "${SSM[@]}" e2e --preset mamba2-2.7b --batch 8 64 128 256 512 --out "$R/e2e-mamba2-2.7b" || return
  "${SSM[@]}" e2e "${HEADLINE[@]}" --greedy --out "$R/e2e-greedy"
}
stage_verify_all() {
  # every key of the shipped table: the headline and the issue-4 shapes
  local shape rc=0
  VERIFY_NAME=verify VERIFY_ARGS="" stage_verify || rc=1
  for shape in "${SHAPES[@]}"; do
    VERIFY_NAME="verify${shape// /}" VERIFY_ARGS="$shape" stage_verify || rc=1
  done
  return $rc
}
stage_verify() {
  # The seed's whole 920-point grid took about 10 s on the H200 (logs/run7-verify.log);
  # VERIFY_ARGS narrows or moves it (e.g. "--dstate 256"), VERIFY_NAME names the folder.
  # shellcheck disable=SC2086
  "${SSM[@]}" verify ${VERIFY_ARGS:-} --out "$R/${VERIFY_NAME:-verify}"
}

MEASURING_CONFIGS=(4,4 4,1 8,1 8,2 16,4 16,8 2,8)
stage_sweep_upstream() {
  # each upstream kernel that can be imported (installed, or a folder in ./.upstream), then
  # ssmdecode's with the same configs
  [ -d .upstream ] && export PYTHONPATH=$PWD/.upstream:$PYTHONPATH
  local kernel module rc=0
  for kernel in mamba_ssm sglang; do
    module=$(python3 -c "from ssmdecode.bench.kernels import UPSTREAM_MODULES; print(UPSTREAM_MODULES['$kernel'])")
    python3 -c "import $module" 2>/dev/null || { echo "no $kernel kernel here: skipped"; continue; }
    "${SSM[@]}" sweep "${HEADLINE[@]}" --kernel "$kernel" --config "${MEASURING_CONFIGS[@]}" \
        --batch 8 128 512 --out "$R/sweep-$kernel" || rc=1
  done
  "${SSM[@]}" sweep "${HEADLINE[@]}" --config "${MEASURING_CONFIGS[@]}" \
      --batch 8 128 512 --out "$R/sweep-ssmdecode" || rc=1
  return $rc
}
stage_verify_ordered() {
  local spec rc=0
  # (4,8) holds 2 fp32 a thread: its own row sum differs from upstream's
  for spec in "4,8,slot,evict,ordered|" "16,1,slot,evict,ordered|" \
              "16,1,slot,evict,ordered|--state-dtype bfloat16" \
              "8,1,slot,evict,ordered|--state-dtype bfloat16" \
              "8,1,slot,evict,ordered|--dstate 256" "32,1,slot,evict,ordered|--dstate 64"; do
    # shellcheck disable=SC2086
    "${SSM[@]}" verify --a "${spec%%|*}" ${spec#*|} --out "$R/verify-ordered/${spec//[|, -]/_}" || rc=1
  done
  return $rc
}
stage_explore_pdl() {
  python3 benchmarks/explore.py "${HEADLINE[@]}" --batch 1 4 8 32 128 512 --pdl both \
      --pdl-trigger both --rounds 3 --out "$R/explore-pdl" \
      --config 2,1,slot,evict,ordered 4,1,slot,evict 16,1,slot,evict,ordered 8,1
}
stage_bench_pdl() {
  "${SSM[@]}" bench "${HEADLINE[@]}" --batch "${BUCKETS[@]}" --config "${UPSTREAM_BEST[@]}" table \
      --pdl --out "$R/bench-pdl"
}
stage_explore_slots() {
  python3 benchmarks/explore.py "${HEADLINE[@]}" --batch 8 128 512 --slots all --rounds 2 \
      --config 16,1,slot,evict,ordered 8,1 4,4 --out "$R/explore-slots"
}
stage_explore_order() {
  python3 benchmarks/explore.py "${HEADLINE[@]}" --batch 8 32 128 256 512 1024 --order both \
      --rounds 2 --config 16,1,slot,evict,ordered 4,1,slot,evict 8,1 --out "$R/explore-order"
}
stage_explore_model() {
  # the same configs in the 4-layer model and in the bench, one run: which attribute (grid
  # order, cache hints) the model's ranking follows at large batch
  local configs=(8,1 4,1 4,1,slot 4,1,evict 4,1,slot,evict 8,1,slot,evict 16,1,slot,evict,ordered)
  "${SSM[@]}" e2e "${HEADLINE[@]}" --batch 256 512 --config "${configs[@]}" \
      --out "$R/explore-model/e2e" &&
  "${SSM[@]}" bench "${HEADLINE[@]}" --batch 256 512 --config "${configs[@]}" \
      --out "$R/explore-model/bench"
}
stage_explore_model_mid() {
  # the mid buckets' hinted entry against the same tile without the hints, in the model
  "${SSM[@]}" e2e "${HEADLINE[@]}" --batch 8 32 64 128 --config table 16,1,slot,ordered \
      --out "$R/e2e-mid-hints"
}
stage_explore_stream() {
  python3 benchmarks/explore_stream.py "${HEADLINE[@]}" --batch 8 32 128 256 512 --slots all \
      --layout tile:2:1 tile:4:1 tile:16:1 flat:1024:4 kernel:2,1,slot,evict \
      kernel:4,1,slot,evict kernel:16,1,slot,evict kernel:16,1,slot,evict,ordered kernel:8,1 \
      --out "$R/explore-stream"
}
stage_bench_order() {
  "${SSM[@]}" bench "${HEADLINE[@]}" --batch "${BUCKETS[@]}" --config "${UPSTREAM_BEST[@]}" table \
      --slot-order --out "$R/bench-slot-order"
}
stage_tune_order() {
  tables_from_package &&
  "${SSM[@]}" tune "${HEADLINE[@]}" --slot-order --batch 128 256 512 1024 \
      --config 2,1,slot,evict 4,1,slot,evict 8,1,slot,evict 4,2,slot,evict 8,2,slot,evict \
      4,1,slot,evict,ordered 8,1,slot,evict,ordered 16,1,slot,evict,ordered \
      --out-dir "$R/configs" --out "$R/tune-slot-order" &&
  tables_into_package &&
  "${SSM[@]}" bench "${HEADLINE[@]}" --batch "${BUCKETS[@]}" --config "${UPSTREAM_BEST[@]}" table \
      --out "$R/bench" &&
  stage_bench_order && VERIFY_NAME=verify VERIFY_ARGS="" stage_verify
}
stage_tune_model() {
  # the large buckets re-tuned without cache hints (run 29: in the 4-layer model the hints cost
  # the step 0.5% at bs 256 and 1.6% at 512, though the bench ranks them 1.5-2% faster), then
  # verify, and the model with the new table against the old entries, with and without order
  tables_from_package &&
  # Runs 34-40 added (8,1) and (8,1,slot,ordered) capped at 64 registers; with packed state
  # rows (run 42) both take 64 and 63 uncapped (32 warps an SM), so the plain configs stand in.
  "${SSM[@]}" tune "${HEADLINE[@]}" --batch 256 512 1024 \
      --config 4,1,slot 8,1,slot 4,1,slot,ordered 16,1,slot,ordered 8,1,slot,ordered \
      --out-dir "$R/configs" --out "$R/tune-model" &&
  tables_into_package &&
  VERIFY_NAME=verify VERIFY_ARGS="" stage_verify &&
  "${SSM[@]}" e2e "${HEADLINE[@]}" --batch 256 512 1024 \
      --config table 8,1 16,1,slot,ordered 8,1,slot,ordered --slot-order \
      --out "$R/e2e-tune-model"
}
stage_tune_in_model() {
  # ssmdecode tune --in-model of the headline's bs 64-512 buckets, with and without cache hints
  # among the candidates, into a table of its own ($OUT/results/configs-in-model): does the
  # tuner, timing model steps, choose what the e2e runs chose by hand (runs 29, 30, 39)?
  "${SSM[@]}" tune "${HEADLINE[@]}" --in-model --batch 64 128 256 512 \
      --config 16,1,slot,evict,ordered 16,1,slot,ordered 4,1,slot,evict 4,1,slot \
      8,1,slot,ordered,regs64 --out-dir "$R/configs-in-model" --out "$R/tune-in-model"
}
stage_tune_steps() {
  # the headline's bs 256-1024 buckets re-tuned by timing model steps (tune --in-model) into
  # the shipped table, then verify: at these batches the bench and the model disagree by more
  # than the choices differ (runs 29-30, 44), and the model is what users run
  tables_from_package &&
  "${SSM[@]}" tune "${HEADLINE[@]}" --in-model --batch 256 512 1024 \
      --config 8,1,slot 4,1,slot 16,1,slot,ordered 8,1,slot,ordered \
      --out-dir "$R/configs" --out "$R/tune-steps" &&
  tables_into_package &&
  VERIFY_NAME=verify VERIFY_ARGS="" stage_verify
}
stage_e2e_pdl() {
  "${SSM[@]}" e2e "${HEADLINE[@]}" --batch 1 8 64 128 512 --config table 8,1 --pdl \
      --out "$R/e2e-pdl-nemotron3-super-tp8"
}
stage_e2e_order() {
  "${SSM[@]}" e2e "${HEADLINE[@]}" --batch 8 64 128 256 512 --config table upstream --slot-order \
      --out "$R/e2e-order-nemotron3-super-tp8"
}
stage_ncu() {
  # NCU_BATCHES narrows the batches (default 8 512); each kernel's stall reasons per issued
  # instruction (the Warp State section's breakdown) and its top stall sites come with it
  local batch rc=0
  for batch in ${NCU_BATCHES:-8 512}; do
    ncu --clock-control none --kernel-name regex:'_selective_state_update_kernel|_scale_in_place' \
        --launch-skip 2 --launch-count 2 --section SpeedOfLight --section MemoryWorkloadAnalysis \
        --section Occupancy --section LaunchStats --section WarpStateStats \
        --section SchedulerStats --section SourceCounters \
        --metrics dram__bytes_read.sum,dram__bytes_write.sum,regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio \
        python3 benchmarks/ncu_driver.py "${HEADLINE[@]}" --batch "$batch" \
        > "$R/ncu-bs$batch.txt" 2>&1 || rc=1
    grep -E "==PROF==|ERR|profiled:" "$R/ncu-bs$batch.txt" | tail -4
  done
  return $rc
}
stage_explore_regs() {
  # register caps (max_registers, ptxas's maxnreg) against the compiler's choice, interleaved:
  # the bf16 state's (16,1,slot,evict,ordered) takes 100 registers (19 warps an SM) since the
  # lean index, 92 under regs96 (21) and 88 under regs88 (23), none spilled (compile_info.py);
  # at the headline, (8,1) and (8,1,slot,ordered) fit 64 without spilling (25 and 28 -> 32)
  local X=(python3 benchmarks/explore.py "${HEADLINE[@]}" --rounds 3)
  "${X[@]}" --state-dtype bfloat16 --batch 64 128 256 512 1024 --out "$R/explore-regs-bf16" \
      --config 16,1,slot,evict,ordered 16,1,slot,evict,ordered,regs96 \
      16,1,slot,evict,ordered,regs88 16,1,slot,ordered,regs88 8,1,slot,evict,ordered &&
  "${X[@]}" --batch 8 64 128 256 512 1024 --out "$R/explore-regs" \
      --config 16,1,slot,evict,ordered 16,1,slot,evict,ordered,regs120 16,1,slot,ordered \
      8,1 8,1,regs64 8,1,slot,ordered 8,1,slot,ordered,regs64
}
stage_explore_packed() {
  # compiled for sm_90, packed rows take the table's (16,1,slot,evict,ordered) from 128 to 95
  # registers (16 -> 21 warps an SM) and upstream's (8,1) from 80 to 64 (25 -> 32), and put
  # every state access's offset into the instruction (compile_info.py, st.addr 17 -> 2)
  local X=(python3 benchmarks/explore.py "${HEADLINE[@]}" --packed-rows both)
  "${X[@]}" --batch 1 8 32 128 256 512 1024 --rounds 3 --out "$R/explore-packed" \
      --config 2,1,slot,evict,ordered 16,1,slot,evict,ordered 8,1 16,1,slot,ordered &&
  "${X[@]}" --state-dtype bfloat16 --batch 8 256 1024 --out "$R/explore-packed-bf16" \
      --config 8,1,slot,evict,ordered 16,1,slot,evict,ordered &&
  "${X[@]}" --dstate 256 --batch 8 256 1024 --out "$R/explore-packed-dstate256" \
      --config 2,1,slot,evict,ordered 4,1,slot,evict,ordered 8,1
}
stage_explore_lean() {
  # the vectors unmasked where the tile divides (_EVEN_VECTORS): compiled for sm_90, the
  # table's bs 8-128 config (16,1,slot,evict,ordered) runs 584 SASS instructions instead of
  # 608 and upstream's (8,1) 8 predicated loads instead of 19, its first state load 15
  # instructions earlier (compile_info.py --off _EVEN_VECTORS --ptx DIR). Run 48
  # (f452066) timed it beside a variant since removed, pad rows reading slot 0 unpredicated
  # (_PAD_READS_SLOT0, with a second call of half-padded batches): docs/performance.md
  python3 benchmarks/explore.py "${HEADLINE[@]}" --switch _EVEN_VECTORS \
      --batch 1 4 8 32 128 512 --rounds 3 \
      --config 2,1,slot,evict,ordered 16,1,slot,evict,ordered 16,1,slot,ordered 8,1 \
      --out "$R/explore-lean"
}
stage_explore_lean_shapes() {
  # the same switch at the other issue-4 shapes, their table entries and an upstream config:
  # run 49's bench had head dim 128's bs-8 entry 3.5% and dstate 256's 2.4% slower than run 43's
  local X=(python3 benchmarks/explore.py "${HEADLINE[@]}" --switch _EVEN_VECTORS --rounds 3
           --batch 8 128 1024)
  "${X[@]}" --headdim 128 --config 4,1,slot,evict,ordered 8,1 --out "$R/explore-lean-headdim128" &&
  "${X[@]}" --dstate 256 --config 2,1,slot,evict,ordered 4,8 --out "$R/explore-lean-dstate256" &&
  "${X[@]}" --dstate 64 --config 8,1,slot,evict 8,4 --out "$R/explore-lean-dstate64" &&
  "${X[@]}" --state-dtype bfloat16 --config 8,1,slot,evict,ordered 4,4 \
      --out "$R/explore-lean-bf16"
}
stage_explore_step_packed() {
  # the model step at bs 8 took 2-5 us longer with the table's config in runs 44-45 than in
  # run 38 (the SSU's profiled time 17.7-18.1 us a step against 15.3), while the bench's A/B
  # saw no change there: the same A/B in the step, one run
  python3 benchmarks/explore_step.py "${HEADLINE[@]}" --switch _PACKED_ROWS --batch 8 64 512 \
      --rounds 2 --config 16,1,slot,evict,ordered 16,1,slot,ordered 8,1 --out "$R/explore-step-packed"
}
stage_ncu_model() {
  # the model step under Nsight Compute with the L2 as the previous kernel left it
  # (--cache-control none): DRAM bytes each kernel reads and writes, with and without the
  # evict-first hints (docs/performance.md, "Cache hints in a model")
  local config name rc=0
  for config in 4,1,slot 4,1,slot,evict; do
    name="$R/ncu-model-${config//,/_}"
    ncu --clock-control none --cache-control none --profile-from-start off \
        --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum -f -o "$name" \
        python3 benchmarks/ncu_model.py run "${HEADLINE[@]}" --batch 512 --config "$config" \
        > "$name.log" 2>&1 || { rc=1; tail -5 "$name.log"; continue; }
    ncu --import "$name.ncu-rep" --csv --page raw --print-units base > "$name.csv" || rc=1
  done
  python3 benchmarks/ncu_model.py summarize "$R"/ncu-model-*.csv || rc=1
  return $rc
}
stage_explore() {
  local X=(python3 benchmarks/explore.py "${HEADLINE[@]}")
  "${X[@]}" --state-dtype bfloat16 --batch 128 512 1024 --out "$R/explore-bf16" \
      --config 4,4 8,8,slot,evict 4,1,slot,evict,ordered 8,1,slot,evict,ordered \
      16,1,slot,evict,ordered 32,1,slot,evict,ordered
}

declare -a SUMMARY
for stage in "$@"; do
  start=$(date +%s)
  echo "=== $stage ($(date -u +%H:%M:%S))"
  "stage_$stage" > "$R/$stage.log" 2>&1
  rc=$?
  last=$(grep -v '^\s*$' "$R/$stage.log" | tail -n 1 | cut -c1-90)
  SUMMARY+=("$(printf '%-8s rc=%-3s %5ss  %s' "$stage" "$rc" "$(( $(date +%s) - start ))" "$last")")
  tar -czf "$OUT/results.tgz" -C "$OUT" results
done
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
printf '%s\n' "${SUMMARY[@]}"
