#!/usr/bin/env bash
# Everything that needs the GPU, in one call: the GPU tests, the golden check against the
# upstream kernel's digests, the PTX check, and the measurements whose results are committed
# under benchmarks/results/<device_key>/. Each stage logs to $OUT/results/<stage>.log; the
# results folder is packed into $OUT/results.tgz (the device tool brings back few files); a
# table of stages, exit codes and times is printed last.
#
#   OUT=/tmp/run bash benchmarks/run_gpu.sh test golden ptx tune sweep bench e2e verify
#
# Where the tree was copied without .git, set SSMDECODE_GIT_COMMIT to the commit it holds, so
# every report names it. One-off exploration stages were taken out once their results were
# committed; docs/performance.md ("Exploration stages taken out") lists each with its runs,
# commits and results. The method: docs/measuring.md.
# Stages:
#   test    pytest -m gpu (every GPU-marked test; TEST_WORKERS=N: in N processes with pytest-xdist,
#           those that time kernels alone after)
#   golden  the golden cases: pytest tests/test_golden.py, required to run (not skip)
#   ptx     the PTX of benchmarks/ptx_snapshot.py's matrix against the committed digests of
#           benchmarks/ptx_reference.json: identical instructions, so the tables still hold
#   tune    ssmdecode tune, headline shape, into $OUT/results/configs (copy the table into
#           src/ssmdecode/configs/ to ship it)
#   tune_shapes  the same for dstate 64 and 256, head dim 128 and a bf16 state (SHAPES_LIST
#           narrows them), added to the shipped table (in $OUT/results/configs, and in the
#           package of this copy for the stages after it)
#   tune_shapes_small  the same for the shapes' bs 1 and 8 buckets only
#   tune_steps  ssmdecode tune --in-model of the headline's bs 256-1024 buckets into the shipped
#           table (as tune_shapes), and verify
#   sweep   ssmdecode sweep: every (BLOCK_M, warps) of the upstream grid at batch 8, 128, 512
#   sweep_upstream  the docs/measuring.md configs swept on the upstream kernels (`--kernel
#           mamba_ssm`, `--kernel sglang`, each when importable, e.g. from ./.upstream) and on
#           ssmdecode's, in the same run
#   bench   ssmdecode bench: bench_headline and bench_shapes
#   bench_headline  the headline shape, upstream configs vs the table, 11 batches
#   bench_shapes  the issue-4 shapes (dstate 64 and 256, head dim 128, bf16 state)
#   bench_order  bench_headline with --slot-order
#   e2e     ssmdecode e2e at two presets, and the greedy identity check
#   e2e_order  ssmdecode e2e of the headline with and without batch_order=slot_order(slots)
#   verify  ssmdecode verify of the table against upstream (VERIFY_ARGS narrows the grid)
#   verify_all  the same for every key of the shipped table (headline and SHAPES_LIST)
#   verify_ordered  the ordered row sum: configs whose own layout changes the bits, on the
#           920-point grid at each issue-4 shape
#   ncu     Nsight Compute (--clock-control none) on the table config and the ceiling's stream,
#           same bytes, at bs 8 and 512 (NCU_BATCHES; benchmarks/ncu_driver.py), with the
#           stall reasons per issued instruction
#   ncu_model  Nsight Compute over model steps with the L2 left as it is (benchmarks/ncu_model.py):
#           DRAM bytes per kernel with and without the cache hints, bs 512
# Speculative decoding (verify calls of T draft tokens a request; .upstream/ on PYTHONPATH for
# the engines' own kernels, which the test stage then requires):
#   bench_spec  ssmdecode bench --tokens 2 4 8 --mode buffer dst replay, headline shape, the
#           upstream-grid configs beside the table (SPEC_CONFIGS overrides the configs)
#   tune_spec  ssmdecode tune --tokens of every mode's entries into the shipped table (as
#           tune_shapes), SPEC_TUNE_CONFIGS the candidates
#   verify_spec  ssmdecode verify --tokens 2 4 8 of each mode's table entries against upstream's
#           config (SPEC_VERIFY_ARGS narrows the grid)
#   (SPEC_MODES narrows the modes of these three, e.g. "replay"; bench_spec then writes
#           bench-spec-<modes>/)
#   e2e_spec  ssmdecode e2e --spec 4: the Mamba2 stack's verify steps, intermediate-state path at
#           upstream's config and at the table's, exact replay and the fast replay (3 interleaved
#           repeats); and the greedy identity of the first three (the exact ones), with the
#           fast route's share of tokens identical to (a)'s
#   tune_dense  ssmdecode tune --tokens --params dense of modes buffer and dst (DENSE_MODES): the
#           entries of verify calls whose A (D, dt_bias) is dense, into the shipped table
#   bench_params  ssmdecode bench --tokens T --params tied dense, one run a T in 2 4 8, modes
#           buffer and dst, bs 8 64 512, the table beside (4,4), (8,1), (4,1), (16,4), 3 rounds
#   bench_gate  bench_params' run at T = 4, A tied, with the gate z given (bench --gate)
#   tune_bf16state  ssmdecode tune --state-dtype bfloat16 --tokens T of modes buffer and dst, T in
#           BF16_TOKENS (default "2 4 8"), into the shipped table (as tune_shapes); BF16_PARAMS=dense
#           the entries of a dense A (tune_dense's candidates)
#   bench_bf16state  bench_params' runs with a bfloat16 state, T in BF16_TOKENS
#   tune_spec_model  ssmdecode tune --tokens 4 --mode buffer --in-model: the T = 4 buffer
#           entries timed as verify steps of the Mamba2 stack, into the shipped table
#   ncu_spec  Nsight Compute of the T = 4 buffer call at bs 512 in the model and back to back,
#           two configs (benchmarks/ncu_model.py run --spec 4 [--alone])
# ReplaySSM against the engines' kernels (local copies in .upstream/, never committed: its
# README.txt; the stage runs without them and marks their rows "not available"):
#   bench_replay  ssmdecode bench-replay, headline shape, window 16: per (T, batch) on the same
#           tensors the floors (read-only and read+write streams of the same slots, the issue's
#           floor), ssmdecode's single-token table (T=1), exact and fast replay, compat.vllm's
#           output-only adapter (T=1), the intermediate-state path (T>=2), and the anchors: vLLM's
#           output-only kernel (T=1, .upstream/vllm_output_only), vLLM's Triton spec kernel (T>=2,
#           .upstream/vllm_spec), flashinfer's checkpointing_ssu (the .so of
#           .upstream/fi_ckpt/so for that T; the stage installs its wheels from
#           .upstream/fi_ckpt/whl into /tmp/site and sets LD_LIBRARY_PATH to torch's
#           libcudart.so.13 and TVM_FFI_DISABLE_TORCH_C_DLPACK=1); accuracy against float64 on
#           the same cases. REPLAY_TOKENS (default "1 4"), REPLAY_BATCHES (default
#           "1 8 64 128 512 1024"), REPLAY_LAWS (default steady) and REPLAY_NAME (default
#           bench-replay) change it
#   bench_replay_flush  the same at T=1 and 4, bs 8 64 128 512, no flush and every slot flushing
#   bench_replay_t28  the same at T=2 and 8, bs 8 64 512, steady
#   e2e_replay  ssmdecode e2e --replay, headline stack: the single-token table path against replay
#           decode (exact, and fast where the tree has it; window 16, replay_advance a step) at
#           bs 8 64 512, then greedy over 256 tokens: each path's tokens against exact replay's
#           (share identical, first divergence) and its logits against float64 (e2e-replay-greedy)
# Accuracy of 16-bit states:
#   accuracy  ssmdecode accuracy, headline shape: 4096 decode steps of a 4-layer random-weight LM
#           (8 teacher-forced and 8 free-running rows) with fp32, bf16 and fp16 states, rounded
#           to nearest and stochastically, against the same LM in float64; slow decay (the
#           default). ACCURACY_ARGS adds options (e.g. "--decay init", "--philox-rounds 4"),
#           ACCURACY_NAME names the folder (default accuracy). 96 s on the H200 (run 63): eager
#           steps, launch-bound (about 1000 small kernels a step)
#   tune_sr  ssmdecode tune --rounding stochastic, headline shape, fp16 and bf16 states
#           (SR_TUNE_DTYPES): the entries of calls that round stochastically (key "...
#           rounding=stochastic") added to the shipped table (as tune_shapes); SR_TUNE_CONFIGS
#           the candidates, SR_TUNE_ROUNDS the leaders' rounds (default 4: at bs 1024 these
#           stores run at the power cap, and their times move with what ran before, runs 89-92)
#   verify_sr  ssmdecode verify --rounding stochastic of those entries against upstream's
#           config, each dtype (SR_VERIFY_ARGS narrows the grid)
#   bench_sr  ssmdecode bench --rounding nearest stochastic, headline shape, bf16 and fp16
#           states: upstream's config and the table's, each rounded to nearest and
#           stochastically, bs 8 64 256 1024 (SR_BATCHES), same run, at the kernels' default
#           Philox rounds; SR_ROUNDS adds runs at other counts (e.g. "7 10")
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/ssmdecode-gpu}
R=$OUT/results
mkdir -p "$R"
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
if [ -d .upstream ]; then  # the engines' kernels, local copies (never committed)
  export PYTHONPATH=$PYTHONPATH:$PWD/.upstream SSMDECODE_UPSTREAM_REQUIRED=1
fi
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

# The GPU tests whose assertions time kernels or kernel order (run alone even with TEST_WORKERS).
SERIAL_TESTS=(tests/test_bench_timer.py tests/test_pdl.py tests/test_e2e.py tests/test_cli_bench.py)
stage_test() {
  # the GPU tests, and the ordered row sum's and pdl's tests compiled for it. TEST_WORKERS=N
  # (with pytest-xdist) runs the tests that time nothing in N processes, a file to a process
  # (the suite is bound by Triton's compiles, on the CPU), then the timing ones alone.
  local par=() ignore=() f
  if [ "${TEST_WORKERS:-1}" -gt 1 ] && python3 -c "import xdist" 2>/dev/null; then
    par=(-n "$TEST_WORKERS" --dist loadfile)
    for f in "${SERIAL_TESTS[@]}"; do ignore+=(--ignore "$f"); done
  fi
  python3 -m pytest -m gpu -q -p no:cacheprovider --durations=25 "${par[@]}" "${ignore[@]}" tests &&
  if [ ${#par[@]} -gt 0 ]; then
    python3 -m pytest -m gpu -q -p no:cacheprovider "${SERIAL_TESTS[@]}"
  fi &&
  python3 -m pytest -q -p no:cacheprovider tests/test_ordered_sum.py tests/test_pdl.py \
      tests/test_batch_order.py tests/test_stochastic_rounding.py
}
stage_golden() {
  # required: on another GPU or stack the digests would be skipped, and this stage must fail
  SSMDECODE_GOLDEN_REQUIRED=1 python3 -m pytest -q -p no:cacheprovider tests/test_golden.py
}
stage_ptx() {
  # the snapshot itself stays out of the results (298 files); its digests go with them
  python3 benchmarks/ptx_snapshot.py write "$OUT/ptx" &&
  python3 benchmarks/ptx_snapshot.py digest "$OUT/ptx" "$R/ptx-digests.json" &&
  python3 benchmarks/ptx_snapshot.py compare benchmarks/ptx_reference.json "$OUT/ptx"
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
# SHAPE_TUNE_CONFIGS (space-separated) replaces them, e.g. for a new key's first tune.
if [ -n "${SHAPE_TUNE_CONFIGS:-}" ]; then IFS=' ' read -ra SHAPE_CONFIGS <<< "$SHAPE_TUNE_CONFIGS"; fi
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
  # The seed's whole 920-point grid took about 10 s on the H200 (logs/run7-verify.log at 91da09d);
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
stage_bench_order() {
  "${SSM[@]}" bench "${HEADLINE[@]}" --batch "${BUCKETS[@]}" --config "${UPSTREAM_BEST[@]}" table \
      --slot-order --out "$R/bench-slot-order"
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
stage_e2e_order() {
  "${SSM[@]}" e2e "${HEADLINE[@]}" --batch 8 64 128 256 512 --config table upstream --slot-order \
      --out "$R/e2e-order-nemotron3-super-tp8"
}
SPEC_TOKENS=(2 4 8)
SPEC_BATCHES=(1 8 64 128 512)
IFS=' ' read -ra SPEC_MODES <<< "${SPEC_MODES:-buffer dst replay}"  # of bench_spec, tune_spec, verify_spec
SPEC_BENCH_DIR=bench-spec
if [ "${SPEC_MODES[*]}" != "buffer dst replay" ]; then
  SPEC_BENCH_DIR=bench-spec-$(IFS=-; echo "${SPEC_MODES[*]}")
fi
# The upstream kernels' grid, as docs/measuring.md measured them (the best of these is the bar's
# baseline), and the table's choice.
IFS=' ' read -ra SPEC_CONFIGS <<< "${SPEC_CONFIGS:-upstream 4,1 8,1 16,4 table}"
# Tune candidates: the upstream grid's best for verify calls (docs/measuring.md) and one-warp
# slot-major tiles with hints and the ordered sum; the tuner adds upstream and default itself.
IFS=' ' read -ra SPEC_TUNE_CONFIGS <<< "${SPEC_TUNE_CONFIGS:-4,1 16,4 2,1,slot,evict,ordered 4,1,slot,evict,ordered 8,1,slot,evict,ordered 16,1,slot,evict,ordered}"
IFS=' ' read -ra SPEC_TUNE_BATCHES <<< "${SPEC_TUNE_BATCHES:-1 8 64 512}"
stage_bench_spec() {
  "${SSM[@]}" bench "${HEADLINE[@]}" --tokens "${SPEC_TOKENS[@]}" --mode "${SPEC_MODES[@]}" \
      --batch "${SPEC_BATCHES[@]}" --config "${SPEC_CONFIGS[@]}" --out "$R/$SPEC_BENCH_DIR"
}
stage_tune_spec() {
  local mode
  tables_from_package  # add to the shipped table
  for mode in "${SPEC_MODES[@]}"; do
    "${SSM[@]}" tune "${HEADLINE[@]}" --tokens "${SPEC_TOKENS[@]}" --mode "$mode" \
        --batch "${SPEC_TUNE_BATCHES[@]}" --config "${SPEC_TUNE_CONFIGS[@]}" --leaders 2 --rounds 1 \
        --out-dir "$R/configs" --out "$R/tune-spec-$mode" || return
  done
  tables_into_package  # the later stages of the run use the new keys
}
stage_verify_spec() {
  local mode rc=0
  for mode in "${SPEC_MODES[@]}"; do
    # shellcheck disable=SC2086
    "${SSM[@]}" verify --tokens "${SPEC_TOKENS[@]}" --mode "$mode" ${SPEC_VERIFY_ARGS:-} \
        --out "$R/verify-spec-$mode" || rc=1
  done
  return $rc
}
# A dense A (and D, dt_bias): the verify entries of such calls (key "... params=dense"), and
# the bench of both layouts a T, every config of a point in 3 interleaved rounds.
DENSE_TUNE_CONFIGS=(4,1 4,1,slot,evict 4,1,slot,evict,ordered 2,1,slot,evict,ordered
                    8,1,slot,evict,ordered)
IFS=' ' read -ra DENSE_MODES <<< "${DENSE_MODES:-buffer dst}"
stage_tune_dense() {
  local mode
  tables_from_package
  for mode in "${DENSE_MODES[@]}"; do
    "${SSM[@]}" tune "${HEADLINE[@]}" --tokens "${SPEC_TOKENS[@]}" --mode "$mode" --params dense \
        --batch "${SPEC_TUNE_BATCHES[@]}" --config "${DENSE_TUNE_CONFIGS[@]}" --leaders 2 --rounds 1 \
        --out-dir "$R/configs" --out "$R/tune-dense-$mode" || return
  done
  tables_into_package
}
# 16-bit state pools: the verify entries of calls whose state is bfloat16 (key "...
# state=bfloat16 mode=M tokens=T"), T in BF16_TOKENS, and their bench (A tied and dense).
BF16_TUNE_CONFIGS=(16,4 8,1 4,1,slot,evict 16,4,slot,evict 8,1,slot,evict 8,1,slot,evict,ordered)
IFS=' ' read -ra BF16_TOKENS <<< "${BF16_TOKENS:-2 4 8}"
BF16_PARAMS=${BF16_PARAMS:-tied}  # dense: the "params=dense" entries (tune_dense's candidates)
BF16_SUFFIX=$([ "$BF16_PARAMS" = dense ] && echo -dense)
[ "$BF16_PARAMS" = dense ] && BF16_TUNE_CONFIGS=("${DENSE_TUNE_CONFIGS[@]}")
stage_tune_bf16state() {
  local t mode
  tables_from_package
  for t in "${BF16_TOKENS[@]}"; do
    for mode in buffer dst; do
      "${SSM[@]}" tune "${HEADLINE[@]}" --state-dtype bfloat16 --tokens "$t" --mode "$mode" \
          --params "$BF16_PARAMS" --batch 8 64 512 --config "${BF16_TUNE_CONFIGS[@]}" --leaders 2 \
          --rounds 1 --out-dir "$R/configs" --out "$R/tune-bf16state-t$t-$mode$BF16_SUFFIX" || return
    done
  done
  tables_into_package
}
stage_bench_bf16state() {
  local t
  for t in "${BF16_TOKENS[@]}"; do
    "${SSM[@]}" bench "${HEADLINE[@]}" --state-dtype bfloat16 --tokens "$t" --mode buffer dst \
        --params tied dense --batch 8 64 512 --config upstream 8,1 4,1 16,4 table --rounds 3 \
        --out "$R/bench-params-t$t-bf16state" || return
  done
}
stage_bench_params() {
  # one run a T, each with its own streams: the table against the upstream-grid configs,
  # A tied and dense, buffer and dst
  local t
  for t in "${SPEC_TOKENS[@]}"; do
    "${SSM[@]}" bench "${HEADLINE[@]}" --tokens "$t" --mode buffer dst --params tied dense \
        --batch 8 64 512 --config upstream 8,1 4,1 16,4 table --rounds 3 \
        --out "$R/bench-params-t$t" || return
  done
}
stage_bench_gate() {
  # the gate z given (its own compiled variant): the table beside the upstream grid, T = 4
  "${SSM[@]}" bench "${HEADLINE[@]}" --tokens 4 --mode buffer dst --gate \
      --batch 8 64 512 --config upstream 8,1 4,1 16,4 table --rounds 3 --out "$R/bench-gate-t4"
}
# The T = 4 buffer entries timed inside the model (the verify step of `e2e --spec 4`): there
# the kernel bench's ranking of the table's configs does not hold (docs/performance.md,
# "The verify step in the model").
MODEL_SPEC_CONFIGS=(8,1,slot 8,1,slot,evict 4,1,slot,evict,ordered 2,1,slot,evict,ordered)
stage_tune_spec_model() {
  tables_from_package
  "${SSM[@]}" tune "${HEADLINE[@]}" --tokens 4 --mode buffer --in-model --batch 8 64 512 \
      --config "${MODEL_SPEC_CONFIGS[@]}" --leaders 2 --rounds 1 \
      --out-dir "$R/configs" --out "$R/tune-spec-model" || return
  tables_into_package
}
stage_ncu_spec() {
  # the verify call at two configs, in the model and back to back, under Nsight Compute with
  # the L2 as the previous kernel left it: time, DRAM bytes, L2 reads and their hit rate
  local config name where rc=0
  local metrics
  metrics=$(python3 -c 'import runpy; print(runpy.run_path("benchmarks/ncu_model.py")["METRIC_LIST"])')
  for config in 2,1,slot,evict,ordered 8,1,slot; do
    for where in model alone; do
      name="$R/ncu-spec-$where-${config//,/_}"
      ncu --clock-control none --cache-control none --profile-from-start off \
          -k regex:selective_state --metrics "$metrics" -f -o "$name" \
          python3 benchmarks/ncu_model.py run "${HEADLINE[@]}" --batch 512 --spec 4 \
          $([ $where = alone ] && echo --alone) --steps 1 --config "$config" \
          > "$name.log" 2>&1 || { rc=1; tail -5 "$name.log"; continue; }
      ncu --import "$name.ncu-rep" --csv --page raw --print-units base > "$name.csv" || rc=1
    done
  done
  python3 benchmarks/ncu_model.py summarize --steps 1 "$R"/ncu-spec-*.csv || rc=1
  return $rc
}
stage_e2e_spec() {
  "${SSM[@]}" e2e "${HEADLINE[@]}" --spec 4 --batch 8 64 128 512 --repeats 3 --out "$R/e2e-spec" &&
  "${SSM[@]}" e2e "${HEADLINE[@]}" --spec 4 --greedy --new-tokens 256 --out "$R/e2e-spec-greedy"
}
stage_bench_replay() (
  # a subshell: the anchors' loading environment stays in this stage
  local fi=$PWD/.upstream/fi_ckpt cudart site=/tmp/site
  export SSMDECODE_ANCHORS=$PWD/.upstream
  if compgen -G "$fi/whl/*.whl" > /dev/null; then  # flashinfer's module loads with tvm_ffi
    python3 -m pip install -q --no-index --no-deps --upgrade --target "$site" "$fi"/whl/*.whl ||
        echo "flashinfer's wheels did not install (python $(python3 -V)): its rows will say not available"
    cudart=$(find "$(python3 -c 'import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))')" \
        -name 'libcudart.so.13*' 2> /dev/null | head -1)
    [ -n "$cudart" ] && export LD_LIBRARY_PATH=$(dirname "$cudart")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    export PYTHONPATH=$PYTHONPATH:$site TVM_FFI_DISABLE_TORCH_C_DLPACK=1
    echo "flashinfer module: wheels in $site, libcudart ${cudart:-not found}"
  fi
  local tokens batches laws
  IFS=' ' read -ra tokens <<< "${REPLAY_TOKENS:-1 4}"
  IFS=' ' read -ra batches <<< "${REPLAY_BATCHES:-1 8 64 128 512 1024}"
  IFS=' ' read -ra laws <<< "${REPLAY_LAWS:-steady}"
  "${SSM[@]}" bench-replay "${HEADLINE[@]}" --tokens "${tokens[@]}" --batch "${batches[@]}" --window 16 \
      --law "${laws[@]}" --out "$R/${REPLAY_NAME:-bench-replay}"
)
stage_bench_replay_flush() {
  REPLAY_TOKENS="1 4" REPLAY_BATCHES="8 64 128 512" REPLAY_LAWS="noflush allflush" \
      REPLAY_NAME=bench-replay-flush stage_bench_replay
}
stage_bench_replay_t28() {
  REPLAY_TOKENS="2 8" REPLAY_BATCHES="8 64 512" REPLAY_NAME=bench-replay-t28 stage_bench_replay
}
stage_e2e_replay() {
  "${SSM[@]}" e2e "${HEADLINE[@]}" --replay --config table --batch 8 64 512 --out "$R/e2e-replay" &&
  "${SSM[@]}" e2e "${HEADLINE[@]}" --replay --greedy --new-tokens 256 --out "$R/e2e-replay-greedy"
}
stage_accuracy() {
  # shellcheck disable=SC2086
  "${SSM[@]}" accuracy "${HEADLINE[@]}" ${ACCURACY_ARGS:-} --out "$R/${ACCURACY_NAME:-accuracy}"
}
stage_bench_sr() {
  local dtype rounds batches default
  IFS=' ' read -ra batches <<< "${SR_BATCHES:-8 64 256 1024}"
  default=$(python3 -c "from ssmdecode.ops.selective_state_update.checks import DEFAULT_PHILOX_ROUNDS as r; print(r)")
  for dtype in bfloat16 float16; do
    for rounds in "$default" ${SR_ROUNDS:-}; do
      "${SSM[@]}" bench "${HEADLINE[@]}" --state-dtype "$dtype" --rounding nearest stochastic \
          --philox-rounds "$rounds" --batch "${batches[@]}" --config upstream table \
          --out "$R/bench-sr-$dtype-r$rounds" || return
    done
  done
}
# Stochastic rounding's candidates: the one-warp ordered tiles (the 16-bit table's picks), with
# the register caps that compile without spilling an fp16 stochastic store (sm_90, offline:
# (8,1,...) 72 registers uncapped and 56 under regs56, 28 and 32 warps an SM; (16,1,...) 128,
# and 104 / 110 under regs104 / regs112), and the bs-1 entry's (8,8,slot,evict).
SR_CONFIGS=(4,1,slot,evict,ordered 8,1,slot,evict,ordered 8,1,slot,evict,ordered,regs56
            16,1,slot,evict,ordered 16,1,slot,evict,ordered,regs104 16,1,slot,evict,ordered,regs112
            8,8,slot,evict)
if [ -n "${SR_TUNE_CONFIGS:-}" ]; then IFS=' ' read -ra SR_CONFIGS <<< "$SR_TUNE_CONFIGS"; fi
stage_tune_sr() {
  local dtype
  tables_from_package
  for dtype in ${SR_TUNE_DTYPES:-float16 bfloat16}; do
    "${SSM[@]}" tune "${HEADLINE[@]}" --state-dtype "$dtype" --rounding stochastic \
        --config "${SR_CONFIGS[@]}" --batch 1 8 64 256 1024 --leaders 2 --rounds "${SR_TUNE_ROUNDS:-4}" \
        --out-dir "$R/configs" --out "$R/tune-sr-$dtype" || return
  done
  tables_into_package
}
stage_verify_sr() {
  local dtype rc=0
  for dtype in ${SR_TUNE_DTYPES:-float16 bfloat16}; do
    # shellcheck disable=SC2086
    "${SSM[@]}" verify --state-dtype "$dtype" --rounding stochastic ${SR_VERIFY_ARGS:-} \
        --out "$R/verify-sr-$dtype" || rc=1
  done
  return $rc
}
stage_ncu() {
  # NCU_BATCHES narrows the batches (default 8 512); each kernel's stall reasons per issued
  # instruction (the Warp State section's breakdown), its top stall sites and its pipes'
  # utilization come with it. NCU_ARGS goes to the driver (e.g. "--state-dtype float16
  # --rounding stochastic") and NCU_NAME into the report's name (ncu<NAME>-bs<batch>.txt).
  local batch rc=0
  for batch in ${NCU_BATCHES:-8 512}; do
    # shellcheck disable=SC2086
    ncu --clock-control none --kernel-name regex:'_selective_state_update_kernel|_scale_in_place' \
        --launch-skip 2 --launch-count 2 --section SpeedOfLight --section MemoryWorkloadAnalysis \
        --section Occupancy --section LaunchStats --section WarpStateStats \
        --section SchedulerStats --section SourceCounters --section ComputeWorkloadAnalysis \
        --section InstructionStats \
        --metrics dram__bytes_read.sum,dram__bytes_write.sum,regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio \
        python3 benchmarks/ncu_driver.py "${HEADLINE[@]}" --batch "$batch" ${NCU_ARGS:-} \
        > "$R/ncu${NCU_NAME:-}-bs$batch.txt" 2>&1 || rc=1
    grep -E "==PROF==|ERR|profiled:" "$R/ncu${NCU_NAME:-}-bs$batch.txt" | tail -4
  done
  return $rc
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
