#!/usr/bin/env bash
# The device check of verisample on an NVIDIA GPU machine (an H200) that has the NVIDIA driver,
# python3 with torch and the CUDA 13 runtime wheels, and no cargo and no network.
#
# Two steps:
#   1. Here, on the build machine (CPU, with ../shared/data beside the checkout):
#        scripts/build-cuda.sh            # dist/verisample-cuda.xz
#        scripts/gpu-check.sh prepare     # .gpu/: the binary, the 78 val images as an input
#                                         # dataset, a CPU f32 reference run of them
#   2. On the GPU machine, in the repository root with .gpu/ carried over:
#        scripts/gpu-check.sh [OUTDIR]    # default OUTDIR: $OUT, else .gpu/results
#
# Step 2 (under 8 minutes): ldd of the binary against the machine's CUDA libraries (found
# through python, not assumed), `doctor --device cuda:0`, `run` of the val images on cuda:0
# in f32 and bf16 (tokens vs the CPU run, accuracy, `verify`). Everything it prints is also
# written to OUTDIR/gpu-check.log, with each run's run.json and doctor's JSON report.
# Exit status: 0 when every check passed.
set -uo pipefail
cd "$(dirname "$0")/.."

gpu=.gpu
if [ "${1:-}" = prepare ]; then
    set -e
    data="${VERISAMPLE_SHARED_DATA:-../shared/data}/orand-car-a"
    [ -f "$data/labels.jsonl" ] || { echo "no $data/labels.jsonl" >&2; exit 1; }
    [ -f dist/verisample-cuda.xz ] || { echo "run scripts/build-cuda.sh first" >&2; exit 1; }
    cpu_bin=target/release/verisample
    [ -x "$cpu_bin" ] || cargo build --release --bin verisample
    rm -rf "$gpu" && mkdir -p "$gpu"
    cp dist/verisample-cuda.xz "$gpu/"
    "$cpu_bin" -q prepare --labels "$data/labels.jsonl" --family OrandCar --split val --out "$gpu/val"
    "$cpu_bin" -q run --model assets/model --data "$gpu/val" --out "$gpu/cpu-f32" \
        --device cpu --dtype f32 --progress none
    du -sh "$gpu"
    echo "carry $gpu to the GPU machine and run scripts/gpu-check.sh there"
    exit 0
fi

out="${1:-${OUT:-$gpu/results}}"
mkdir -p "$out"
log="$out/gpu-check.log"
exec > >(tee "$log") 2>&1
failures=0
check() { # NAME COMMAND...: run, report, count failures
    local name="$1"; shift
    echo "==> $name"
    if "$@"; then echo "ok   $name"; else echo "FAIL $name (exit $?)"; failures=$((failures + 1)); fi
}

bin="$gpu/verisample"
[ -x "$bin" ] || xz -dc "$gpu/verisample-cuda.xz" >"$bin" && chmod +x "$bin"
cu13="$(python3 -c 'import nvidia, os; print(os.path.join(list(nvidia.__path__)[0], "cu13", "lib"))' 2>/dev/null)"
driver="$(dirname "$(ldconfig -p | awk '/libcuda\.so\.1 /{print $NF; exit}')" 2>/dev/null)"
for d in /usr/local/nvidia/lib64 /usr/local/nvidia/lib "$driver"; do
    [ -e "$d/libcuda.so.1" ] && driver="$d" && break
done
export LD_LIBRARY_PATH="$cu13:$driver${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
echo "CUDA runtime libraries: $cu13; driver: $driver"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
check "ldd resolves every library" bash -c "! ldd '$bin' | grep -q 'not found'"
ldd "$bin" | grep -E 'cuda|cublas|curand|nvrtc'

check "doctor --device cuda:0" "$bin" doctor --device cuda:0
"$bin" -q doctor --device cuda:0 --json >"$out/doctor.json" 2>/dev/null || true

tokens_equal() { # RUN_DIR: greedy tokens of every val item equal the CPU f32 run's
    python3 - "$gpu/cpu-f32/generations.jsonl" "$1/generations.jsonl" <<'EOF'
import json, sys
def load(p):
    out = {}
    for line in open(p):
        g = json.loads(line)
        out[(g["file"], g["row"], g.get("question"))] = g["answer"]["token_ids"]
    return out
cpu, dev = load(sys.argv[1]), load(sys.argv[2])
same = sum(1 for k, v in cpu.items() if dev.get(k) == v)
print(f"tokens identical to the CPU f32 run: {same}/{len(cpu)}")
sys.exit(0 if same >= len(cpu) - 2 and len(dev) == len(cpu) else 1)
EOF
}
accepted() { # RUN_DIR: the counts of run.json (items, accepted, rejected, ...)
    python3 -c 'import json,sys; r=json.load(open(sys.argv[1]+"/run.json")); print("run.json:", {k: v for k, v in r.items() if isinstance(v, (int, float))})' "$1"
}
for dtype in f32 bf16; do
    dir="$out/cuda-$dtype"
    rm -rf "$dir"
    start=$(date +%s.%N)
    check "run val on cuda:0 in $dtype" "$bin" -q run --model assets/model --data "$gpu/val" \
        --out "$dir" --device cuda:0 --dtype "$dtype" --progress none
    echo "wall seconds: $(echo "$(date +%s.%N) - $start" | bc)"
    check "verify cuda-$dtype" "$bin" verify "$dir"
    accepted "$dir"
    [ "$dtype" = f32 ] && check "cuda f32 tokens vs cpu f32 (>= 76/78)" tokens_equal "$dir"
done

echo "gpu-check: $failures failure(s)"
[ "$failures" -eq 0 ]
