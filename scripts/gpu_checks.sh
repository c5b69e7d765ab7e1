#!/usr/bin/env bash
# The GPU checks of issue 19 in one call of a lent NVIDIA machine (the device tool), in order of
# value, each step under its own time limit so that one hang cannot eat the lease:
#   the six trials the H100 box recorded (deit3_small b32 eager at five precisions, resnet50 b32
#   inductor tf32), ngb vs a plain loop (benchmarks/parity.py), ngb vs torch's Timer
#   (benchmarks/fidelity.py eager-cuda).
#
#   bash scripts/gpu_checks.sh                      # results and logs under $OUT (else gpu-out/)
#   STEPS="parity-mha deit" PRECISIONS="bf16 fp16" bash scripts/gpu_checks.sh   # a part
#
# The machine's python holds torch; ngb goes in beside it without dependencies (ENVIRONMENT.md).
set -u
OUT=${OUT:-gpu-out}
PY=${PY:-python3}
STEPS=${STEPS:-"trials parity-mha fidelity parity-deit"}
export PYTHONUNBUFFERED=1
TRIALS=${TRIALS:-/tmp/ngb-gpu-trials}  # kept out of $OUT: the device tool returns 8 files at most
mkdir -p "$OUT" "$TRIALS"
log() { echo "== $(date +%T) load $(cut -d' ' -f1-3 /proc/loadavg): $*"; }

log install
if ! $PY -m pip install -q --no-deps --no-build-isolation -e . >"$OUT/install.log" 2>&1; then
    tail -5 "$OUT/install.log"
    exit 1
fi
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,persistence_mode --format=csv
echo "$(nproc) CPUs"
$PY -c "import torch, timm; print('torch', torch.__version__, 'timm', timm.__version__, torch.cuda.get_device_name())"

measure() {  # NAME LIMIT_S ARGS...: one `ngb measure ... --device cuda --json`, summarised
    local name=$1 limit=$2
    shift 2
    log "measure $name"
    timeout -k 5 "$limit" $PY -m ngb.sweeps.cli measure "$@" --device cuda --json \
        >"$TRIALS/$name.json" 2>"$TRIALS/$name.err"
    echo "rc=$?"
    tail -n 3 "$TRIALS/$name.err"
    $PY scripts/trial_summary.py "$TRIALS/$name.json"
    tar czf "$OUT/trials.tgz" -C "$TRIALS" .  # after every trial: a later timeout loses nothing
}

for step in $STEPS; do
    case $step in
    trials)
        for p in ${PRECISIONS:-fp32 default tf32 bf16 fp16}; do
            measure "deit3-$p" 75 deit3_small_patch16_224 -c identity -b 32 --precision "$p"
        done
        measure resnet50-inductor-tf32 150 resnet50 -c inductor -b 32 --precision tf32
        ;;
    deit)
        for p in ${PRECISIONS:-fp32 default tf32 bf16 fp16}; do
            measure "deit3-$p" 75 deit3_small_patch16_224 -c identity -b 32 --precision "$p"
        done
        ;;
    inductor)
        measure resnet50-inductor-tf32 150 resnet50 -c inductor -b 32 --precision tf32
        ;;
    parity-mha)
        log parity mha
        timeout -k 5 120 $PY benchmarks/parity.py --device cuda --rounds 2 --workload mha:128:1
        ;;
    parity-deit)
        log parity deit3
        timeout -k 5 120 $PY benchmarks/parity.py --device cuda --rounds 2 \
            --workload deit3_small_patch16_224::32
        ;;
    fidelity)
        log fidelity
        timeout -k 5 100 $PY benchmarks/fidelity.py --rounds 1 --cases eager-cuda
        ;;
    esac
done
log done
