#!/usr/bin/env bash
# The device check of verisample on an NVIDIA GPU machine (an H200) that has the NVIDIA driver,
# python3 with torch and the CUDA 13 runtime wheels, and no cargo, no network, and maybe no xz
# or bc (neither is used here).
#
# Two steps:
#   1. Here, on the build machine (CPU, with ../shared/data beside the checkout):
#        scripts/build-cuda.sh --flash-attn   # dist/verisample-cuda.xz (or without
#                                             # --flash-attn: the portable path only)
#        scripts/gpu-check.sh prepare         # .gpu/: the binary, the 78 val images as an
#                                             # input dataset and as a folder (for bench)
#   2. On the GPU machine, in the repository root with .gpu/ carried over:
#        scripts/gpu-check.sh [OUTDIR]        # default OUTDIR: $OUT, else .gpu/results
#
# Step 2 (a few minutes): ldd of the binary against the machine's CUDA libraries (found through
# python, not assumed); `doctor --device cuda:0` once, on the 78 val images: kernel accuracy of
# every attention path (portable, and flash-attn in a --flash-attn build) against a direct
# reference, batch invariance, and greedy tokens of the device against the CPU's native kernels
# (f32) and of flash-attn against the portable path (bf16), within doctor's one token tolerance
# (TOKEN_DIFF_PER in src/doctor/models.rs: 2 of 78); then `run` of the val images on cuda:0 in
# f32 and bf16 (the path `run` takes there: portable) with `verify` and their accuracy; the
# bf16 run again at --max-batch 1 and 7, its splits compared byte for byte with the first
# (batch invariance where users run); and `bench` of the val images at --max-batch 1 and 16 (4
# warm-up requests, then 3 measured passes; printed: the engine block, then per pass requests/s,
# images/s, generated tokens/s, TTFT and latency p50 and device memory in use). The runs write
# under .gpu/work; OUTDIR receives only gpu-check.log, doctor.json, each run's run.json and the
# bench reports (bench-bN.json: settings, engine, each pass's metrics, their spread, each image's
# tokens), so what comes back stays a handful of small files.
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
    mkdir -p "$gpu/val-images" && cp "$data"/val/* "$gpu/val-images/"
    du -sh "$gpu"
    echo "carry $gpu to the GPU machine and run scripts/gpu-check.sh there"
    exit 0
fi

out="${1:-${OUT:-$gpu/results}}"
work="$gpu/work"
mkdir -p "$out" "$work"
log="$out/gpu-check.log"
exec > >(tee "$log") 2>&1
failures=0
check() { # NAME COMMAND...: run, report, count failures
    local name="$1"; shift
    echo "==> $name"
    if "$@"; then echo "ok   $name"; else echo "FAIL $name (exit $?)"; failures=$((failures + 1)); fi
}
now_ms() { echo $(($(date +%s%N) / 1000000)); }

bin="$gpu/verisample"
if [ ! -x "$bin" ]; then
    python3 -c 'import lzma, shutil, sys
with lzma.open(sys.argv[1]) as src, open(sys.argv[2], "wb") as dst:
    shutil.copyfileobj(src, dst)' "$gpu/verisample-cuda.xz" "$bin" && chmod +x "$bin"
fi
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

doctor() { # once, as JSON; its checks printed one per line
    "$bin" -q doctor --device cuda:0 --data "$gpu/val" --json >"$out/doctor.json"
    local status=$?
    python3 - "$out/doctor.json" <<'EOF'
import json, sys
try:
    r = json.load(open(sys.argv[1]))
except Exception as e:
    sys.exit(f"doctor wrote no report: {e}")
print(f"device {r['device']}, memory {r.get('memory')}, dtypes {', '.join(r['dtypes'])}")
for c in r["checks"]:
    print(f"{c['status']:<5} {c['name']:<48} {c['detail']}")
EOF
    return $status
}
check "doctor --device cuda:0 (78 val images)" doctor

summary() { # RUN_DIR NAME: accuracy and counts from run.json, copied back as NAME.run.json
    cp "$1/run.json" "$out/$2.run.json" 2>/dev/null || { echo "no run.json in $1"; return 1; }
    python3 - "$1/run.json" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
s = r.get("stats", r)
keys = ("input_items", "accepted", "rejected", "errors")
print("run.json:", {k: s.get(k) for k in keys}, "status:", r.get("status"))
EOF
}
for dtype in f32 bf16; do
    dir="$work/cuda-$dtype"
    rm -rf "$dir"
    start=$(now_ms)
    check "run val on cuda:0 in $dtype" "$bin" -q run --model assets/model --data "$gpu/val" \
        --out "$dir" --device cuda:0 --dtype "$dtype" --progress none
    ms=$(($(now_ms) - start))
    echo "wall seconds: $((ms / 1000)).$(printf '%03d' $((ms % 1000)))"
    check "verify cuda-$dtype" "$bin" verify "$dir"
    summary "$dir" "cuda-$dtype"
done

splits() { # RUN_DIR: sha256 of every split file, sorted by name
    (cd "$1/data" && sha256sum -- *.parquet | sort -k 2)
}
same_splits() { # BATCH: the bf16 run again at --max-batch BATCH, splits equal to the first
    local dir="$work/cuda-bf16-b$1"
    rm -rf "$dir"
    "$bin" -q run --model assets/model --data "$gpu/val" --out "$dir" --device cuda:0 \
        --dtype bf16 --progress none --max-batch "$1" || return 1
    diff <(splits "$work/cuda-bf16") <(splits "$dir") && echo "splits identical at --max-batch $1"
}
for batch in 1 7; do
    check "splits of bf16 at --max-batch $batch equal the first run's" same_splits "$batch"
done
accuracy() { # NAME ARGS...: a bf16 run of the val images with ARGS; its accepted count
    local dir="$work/$1"; shift
    rm -rf "$dir"
    "$bin" -q run --model assets/model --data "$gpu/val" --out "$dir" --device cuda:0 \
        --dtype bf16 --progress none "$@" || return 1
    python3 -c "import json, sys; s = json.load(open(sys.argv[1]))['stats']
print(sys.argv[2], 'accepted', s['accepted'], 'of', s['input_items'])" "$dir/run.json" "$*"
}
# Session 38 saw bf16 runs with the default KV pool (80 % of free memory) accept 39 of 78
# where the CPU accepts 65; these locate it: a small pool, a small batch.
check "bf16 with a 2 GiB KV pool" accuracy bf16-kv2 --kv-cache-gib 2
for batch in 16 64 65; do  # 65: a decode step past one batched call of the portable attention
    check "bf16 at --max-batch $batch" accuracy "bf16-b$batch" --max-batch "$batch"
done
check "bf16 again, as the first run (run to run)" accuracy bf16-again
check "splits of the bf16 rerun equal the first run's" bash -c \
    "diff <(cd '$work/cuda-bf16/data' && sha256sum -- *.parquet) <(cd '$work/bf16-again/data' && sha256sum -- *.parquet)"

bench() { # BATCH: bench on the val images, bf16, 3 measured passes, JSON report kept
    "$bin" -q bench --model assets/model --images "$gpu/val-images" --repeat 3 \
        --device cuda:0 --dtype bf16 --max-new-tokens 64 --max-batch "$1" --json \
        >"$out/bench-b$1.json" || return 1
    python3 - "$out/bench-b$1.json" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
print("engine", r["engine"], "requests", r["requests"], "skipped", len(r["skipped"]))
for i, p in enumerate(r["passes"]):
    print(f"pass {i + 1}: {p['requests_per_s']:.1f} req/s, {p['images_per_s']:.1f} images/s, "
          f"{p['generated_tokens_per_s']:.0f} generated tok/s, TTFT p50 {p['ttft_s']['p50']:.4f} s, "
          f"latency p50 {p['latency_s']['p50']:.4f} s, device memory {p['device_memory_used_bytes']}")
EOF
}
for batch in 1 16; do
    check "bench bf16 --max-batch $batch" bench "$batch"
done

echo "gpu-check: $failures failure(s)"
[ "$failures" -eq 0 ]
