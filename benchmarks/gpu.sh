#!/usr/bin/env bash
# The GPU measurements of packed training (docs/performance.md, "Packed batches"), in one run of at most 570 s on
# an NVIDIA H100 or H200, bf16, on Multi30k's lengths:
#
#   bash benchmarks/gpu.sh OUTPUT_DIR [MULTI30K_DIR]        (MULTI30K_DIR: default data/multi30k, see docs/data.md)
#
# 1. base, eager and compiled side by side (scripts/benchmark.py --only compile --packing): ours on packed batches,
#    eager and compiled; Marian and ours on their padded token-budget batches, eager. Steady target tokens/s, the
#    first epoch with its compiling, a 15-minute run projected from both, FLOP/s and share of the measured peak (the
#    model's FLOPs and the pairs' own), peak memory, each one's padding.  -> benchmarks/results-gpu-packed-base.json
# 2. big, the same: its share of the peak.  -> benchmarks/results-gpu-packed-big.json
# 3. base, Marian compiled alone (the training section with --compile, its padded batches: a graph for the first
#    shape, more as shapes change; ours padded is not compiled: each new shape costing a new graph is what packing
#    removes).  -> benchmarks/results-gpu-packed-base-marian-compiled.json
# 4. if time is left, base with FlexAttention's block masks in place of dense masks for the packed batches
#    (--packed_attention flex_attention), eager and compiled.  -> benchmarks/results-gpu-packed-flex.json
# 5. on a machine with several GPUs, DDP's scaling: base trained with DDP on Multi30k's lengths (32,768-token batches per
#    GPU, bf16) on 1 GPU and on all of them (tools/benchmarking/data_parallel.py), target tokens/s of each, the
#    speed-up and the efficiency beside NVIDIA's published 6.72x on 8 A100s for fairseq's Transformer.
#    -> benchmarks/results-gpu-ddp-scaling.json. Skipped on one GPU (GPUS=N sets the count; SCALING_ARGS is added to
#    both launches, as BENCHMARK_ARGS to the others).
# The steps go in that order, the most wanted first, since a compiled half that is cut short keeps none of its figures.
#
# Each step runs under a time limit so that the whole ends within TOTAL_SECONDS (default 570); the benchmark writes
# its JSON after each part, so a step cut short keeps what it measured. Each step's output goes to OUTPUT_DIR/<step>.log.
# On a machine without internet, put the wheels this repository needs beyond the machine's torch and transformers
# (datasets, evaluate, sacrebleu and theirs) in wheelhouse/ at the repository's root: they are installed from there.
# BENCHMARK_ARGS is added to every benchmark command (a smoke test elsewhere: "--device cpu --dtype fp32 --sizes tiny").
set -uo pipefail
started=$SECONDS
out=${1:?usage: bash benchmarks/gpu.sh OUTPUT_DIR [MULTI30K_DIR]}
data=${2:-data/multi30k}
total=${TOTAL_SECONDS:-570}
mkdir -p "$out"
out=$(cd "$out" && pwd)  # both paths as given from here, before moving to the repository
[ -d "$data" ] && data=$(cd "$data" && pwd) || echo "gpu.sh: no folder $data: the batches take synthetic Multi30k-like lengths"
cd "$(dirname "$0")/.."
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false \
    HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1

if compgen -G "wheelhouse/*.whl" > /dev/null; then
    python -m pip install --quiet --no-index --find-links wheelhouse wheelhouse/*.whl > "$out/install.log" 2>&1 ||
        echo "gpu.sh: installing wheelhouse/ failed (see $out/install.log)"
fi
python -c "import torch, transformers, datasets, tools.benchmarking
print('torch', torch.__version__, 'transformers', transformers.__version__, 'cuda', torch.cuda.is_available(),
      torch.cuda.get_device_name() if torch.cuda.is_available() else '')" || {
    echo "gpu.sh: the benchmark cannot be imported; install the repository's requirements (or fill wheelhouse/)" >&2
    exit 1
}

left() { echo $((total - (SECONDS - started))); }

# step NAME SECONDS ARGS...: scripts/benchmark.py ARGS into benchmarks/results-gpu-packed-NAME.json (and a copy in
# OUTPUT_DIR), stopped after
# SECONDS (or when the total is spent, whichever comes first)
step() {
    local name=$1 limit=$2
    shift 2
    [ "$(left)" -lt "$limit" ] && limit=$(left)
    if [ "$limit" -lt 60 ]; then
        echo "gpu.sh: $name skipped, $(left) s left"
        return
    fi
    echo "gpu.sh: $name, at most $limit s"
    # shellcheck disable=SC2086  # BENCHMARK_ARGS is a list of flags
    timeout --signal=INT --kill-after=20 "$limit" python scripts/benchmark.py --device cuda --dtype bf16 \
        --data_dir "$data" --label_smoothing 0.1 --fresh_runs 1 --packing "$@" ${BENCHMARK_ARGS:-} \
        --output "benchmarks/results-gpu-packed-$name.json" > "$out/$name.log" 2>&1
    echo "gpu.sh: $name ended with status $? after $((SECONDS - started)) s in all"
    # written where it is committed, so that the command it records writes that file; a copy goes to OUTPUT_DIR
    cp "benchmarks/results-gpu-packed-$name.json" "$out/" 2>/dev/null
    tail -n 40 "$out/$name.log"
}

base=(--sizes base --steps 20 --repetitions 3)
step base 240 "${base[@]}" --only compile --compiled_runs packed
step big 200 --sizes big --steps 10 --repetitions 2 --only compile --compiled_runs packed
step base-marian-compiled 300 "${base[@]}" --only train --compile --compiled_runs marian
step flex 150 "${base[@]}" --only compile --compiled_runs packed --packed_attention flex_attention

# scaling SECONDS: DDP on 1 GPU, then on all, each launch stopped after half of SECONDS (or what is left)
scaling() {
    local limit=$1 gpus=${GPUS:-$(python -c "import torch; print(torch.cuda.device_count())")}
    if [ "$gpus" -lt 2 ]; then
        echo "gpu.sh: ddp-scaling skipped: $gpus GPU(s)"
        return
    fi
    [ "$(left)" -lt "$limit" ] && limit=$(left)
    if [ "$limit" -lt 60 ]; then
        echo "gpu.sh: ddp-scaling skipped, $(left) s left"
        return
    fi
    echo "gpu.sh: ddp-scaling on 1 and $gpus GPUs, at most $limit s"
    for count in 1 "$gpus"; do
        several=(); [ "$count" -gt 1 ] && several=(--multi_gpu)  # accelerate refuses --multi_gpu for one process
        # shellcheck disable=SC2086  # SCALING_ARGS is a list of flags
        timeout --signal=INT --kill-after=20 $((limit / 2)) python -m accelerate.commands.launch "${several[@]}" \
            --num_machines 1 --num_processes "$count" --mixed_precision no --dynamo_backend no \
            -m tools.benchmarking.data_parallel --engine ddp --data_dir "$data" ${SCALING_ARGS:-} \
            --output "$out/ddp-$count.json" >> "$out/ddp-scaling.log" 2>&1
        echo "gpu.sh: ddp on $count GPU(s) ended with status $? after $((SECONDS - started)) s in all"
    done
    python -m tools.benchmarking.data_parallel scaling "$out/ddp-1.json" "$out/ddp-$gpus.json" \
        --output benchmarks/results-gpu-ddp-scaling.json && cp benchmarks/results-gpu-ddp-scaling.json "$out/" ||
        tail -n 40 "$out/ddp-scaling.log"
}
scaling 200
ls -l "$out"
