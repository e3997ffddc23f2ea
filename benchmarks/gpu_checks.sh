#!/usr/bin/env bash
# The GPU checks of issue #32 in one run (under 10 minutes on one H100/H200): the `cuda` tests, streaming rtn and
# gptq of a 1B-shape Llama, the int4/bf16 layer table and GPTQ against llm-compressor. Each step has its own time
# limit and writes its whole log to $OUT/<step>.log; the console gets each log's tail and the step's exit status.
#
#     OUT=/tmp/gpu PY=python3 TOK=path/to/saved/tokenizer LLMC_SITE=/tmp/llmc bash benchmarks/gpu_checks.sh [steps]
#
# steps (default all): tests stream int4 gptq; also gptqmem (not in the default: slimkit's GPTQ under the live-bytes
# accounting, the code lines holding its GPU peak, ~1 min). TOK is a saved tokenizer folder for the streamed checkpoints (a GPU
# machine has no zoo packages); LLMC_SITE a folder holding llm-compressor and the versions it pins (its own
# environment, put first on PYTHONPATH for its side only).
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/slimkit-gpu-checks}
PY=${PY:-python3}
mkdir -p "$OUT"
steps=${*:-tests stream int4 gptq}

step() {
    local name=$1 limit=$2
    shift 2
    echo "=== $name (limit ${limit} s): $*"
    local start=$SECONDS
    timeout "$limit" "$@" >"$OUT/$name.log" 2>&1
    local rc=$?
    tail -n "${TAIL:-25}" "$OUT/$name.log"
    echo "=== $name: exit $rc after $((SECONDS - start)) s"
}

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
"$PY" -c "import torch, transformers; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'transformers', transformers.__version__)"
for s in $steps; do
    case $s in
        tests) step tests "${TESTS_LIMIT:-240}" "$PY" -m pytest -q -m cuda -p no:cacheprovider --timeout 120 \
                   -o addopts="-ra --import-mode=importlib" $(grep -rl "mark.cuda" tests --include="test_*.py") ;;
        stream) step stream "${STREAM_LIMIT:-200}" "$PY" benchmarks/stream_llm.py --sizes 1b --methods rtn gptq \
                    --device cuda --threads 8 ${TOK:+--tokenizer "$TOK"} ${STREAM_ARGS:-} ;;
        int4) step int4 "${INT4_LIMIT:-150}" "$PY" benchmarks/int4_cuda.py ;;
        gptq) step gptq "${GPTQ_LIMIT:-200}" "$PY" benchmarks/gptq_llmcompressor.py --device cuda \
                  ${LLMC_SITE:+--llmc-site "$LLMC_SITE"} ${GPTQ_ARGS:-} ;;
        gptqmem) step gptqmem "${GPTQMEM_LIMIT:-120}" "$PY" benchmarks/gptq_llmcompressor.py --device cuda \
                     --live-bytes --shape 1b --threads 8 ;;
        *) echo "unknown step $s (tests stream int4 gptq gptqmem)"; exit 2 ;;
    esac
done
