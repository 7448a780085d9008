#!/usr/bin/env bash
# Build `verisample --features cuda` on a machine with no GPU and no system CUDA toolkit.
#
# A machine with a CUDA toolkit (and a GPU) needs none of this: `cargo build --release
# --features cuda`. This script instead installs the CUDA 13.0 toolchain from PyPI wheels into
# a cache folder, makes a link folder with unversioned `.so` names and a stub `libcuda.so`
# (SONAME `libcuda.so.1`; only for linking: at run time the GPU machine's driver is loaded),
# and builds for `CUDA_COMPUTE_CAP` (default 90, Hopper: H100/H200).
#
# Every CUDA wheel is pinned to the 13.0 line: nvcc 13.1+ writes PTX that the 580 driver (the
# H200 machines') refuses. Steps and measurements: shared/notes/cuda-build-recipe.md.
#
# Usage: scripts/build-cuda.sh [--check | --flash-attn]
#   --check       only `cargo check` the cuda feature (build scripts included: candle's kernels
#                 are compiled to PTX by nvcc); what CI runs. No binary, no link, no stub.
#   --flash-attn  build with the `flash-attn` feature: FlashAttention-2 from `candle-flash-attn`
#                 (53 nvcc units against the CUTLASS headers of commit 7d49e6c7, laid out from
#                 ../shared/vendor without network; measured on this 2-core machine:
#                 BENCHMARKS.md, "Building flash-attn"). The compiled objects are kept in
#                 CANDLE_FLASH_ATTN_BUILD_DIR (default: the cache folder), so a rebuild only
#                 links them.
# Output (full build): target-cuda/release/verisample and dist/verisample-cuda.xz (xz -6, for
# copying to the GPU machine; scripts/gpu-check.sh unpacks it).
# Environment: VERISAMPLE_CUDA_CACHE (default ~/.cache/verisample-cuda13.0), CUDA_COMPUTE_CAP,
# CARGO_TARGET_DIR (default target-cuda: a CPU build's cache stays intact); for --flash-attn
# also CUDAFORGE_HOME (default ~/.cudaforge), CUDAFORGE_THREADS (default: every core),
# CANDLE_FLASH_ATTN_BUILD_DIR, VERISAMPLE_CUTLASS_HEADERS (the headers tarball; default
# ../shared/vendor/cutlass-7d49e6c7e2f8896c-headers.tar.xz).
set -euo pipefail
cd "$(dirname "$0")/.."

mode=build
features=cuda
case "${1:-}" in
    --check) mode=check ;;
    --flash-attn) features=flash-attn ;;
    "") ;;
    *) echo "usage: $0 [--check | --flash-attn]" >&2; exit 2 ;;
esac

cache="${VERISAMPLE_CUDA_CACHE:-$HOME/.cache/verisample-cuda13.0}"
venv="$cache/venv"
links="$cache/links"
export CUDA_COMPUTE_CAP="${CUDA_COMPUTE_CAP:-90}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-target-cuda}"

# 1. The toolchain: a venv of its own (torch in the same environment pulls newer CUDA wheels
#    into the same `nvidia/cu13` folder, and a mix of minors breaks ptxas or the driver's JIT).
if [ ! -x "$venv/bin/python" ]; then
    python3 -m venv "$venv"
fi
if ! "$venv/bin/python" -m pip show nvidia-cuda-nvcc >/dev/null 2>&1; then
    "$venv/bin/python" -m pip install --quiet \
        "nvidia-cuda-nvcc==13.0.*" "nvidia-cuda-runtime==13.0.*" "nvidia-cuda-crt==13.0.*" \
        "nvidia-nvvm==13.0.*" "nvidia-cuda-nvrtc==13.0.*" "nvidia-cuda-cccl==13.0.*" \
        "nvidia-cublas==13.0.*" "nvidia-curand==10.4.0.*"
fi
cu13="$("$venv/bin/python" -c 'import nvidia, os; print(os.path.join(list(nvidia.__path__)[0], "cu13"))')"
nvcc_version="$("$cu13/bin/nvcc" --version | sed -n 's/.*release \([0-9.]*\),.*/\1/p')"
case "$nvcc_version" in
    13.0) ;;
    *) echo "nvcc $nvcc_version in $cu13: need 13.0 (the 580 driver refuses newer PTX)" >&2; exit 1 ;;
esac

# 2. The link folder: unversioned names for the versioned wheel libraries, the headers.
mkdir -p "$links/lib"
ln -sfn "$cu13/include" "$links/include"
ln -sfn "$cu13/bin" "$links/bin"
for so in "$cu13"/lib/lib*.so.*; do
    base="$(basename "$so")"
    ln -sfn "$so" "$links/lib/${base%%.so.*}.so"
done

export PATH="$cu13/bin:$PATH"
export CUDARC_CUDA_VERSION=13000
export CUDA_ROOT="$links" CUDA_PATH="$links" CUDA_HOME="$links" NVCC="$cu13/bin/nvcc"

if [ "$mode" = check ]; then
    cargo check --release --workspace --all-targets --features cuda
    echo "cuda feature: cargo check passed (compute capability $CUDA_COMPUTE_CAP, nvcc $nvcc_version)"
    exit 0
fi

# 3. flash-attn: the CUTLASS headers where cudaforge looks before it would clone them
#    (`$CUDAFORGE_HOME/git/checkouts/cutlass-<commit prefix>/`, a git folder whose HEAD is the
#    commit), and a kept folder for the 53 compiled objects.
if [ "$features" = flash-attn ]; then
    commit=7d49e6c7e2f8896c47f586706e67e1fb215529dc
    export CUDAFORGE_HOME="${CUDAFORGE_HOME:-$HOME/.cudaforge}"
    cutlass="$CUDAFORGE_HOME/git/checkouts/cutlass-${commit:0:16}"
    if [ "$(git -C "$cutlass" rev-parse HEAD 2>/dev/null)" != "$commit" ] || [ ! -d "$cutlass/include" ]; then
        headers="${VERISAMPLE_CUTLASS_HEADERS:-../shared/vendor/cutlass-${commit:0:16}-headers.tar.xz}"
        [ -f "$headers" ] || { echo "no CUTLASS headers at $headers (set VERISAMPLE_CUTLASS_HEADERS)" >&2; exit 1; }
        rm -rf "$cutlass" && mkdir -p "$(dirname "$cutlass")"
        tar xJf "$headers" -C "$(dirname "$cutlass")"
        git -C "$cutlass" init -q
        echo "$commit" >"$cutlass/.git/HEAD"
        [ "$(git -C "$cutlass" rev-parse HEAD)" = "$commit" ] || { echo "CUTLASS layout failed" >&2; exit 1; }
    fi
    export CUDAFORGE_THREADS="${CUDAFORGE_THREADS:-$(nproc)}"
    export CANDLE_FLASH_ATTN_BUILD_DIR="${CANDLE_FLASH_ATTN_BUILD_DIR:-$cache/flash-attn-build}"
    mkdir -p "$CANDLE_FLASH_ATTN_BUILD_DIR"
fi

# 4. Link against the wheels; the driver comes from a stub defining every driver symbol that
#    cudarc references (listed from its rlib, so it follows cudarc's version).
export RUSTFLAGS="${RUSTFLAGS:-} -L $links/lib"
if [ ! -f "$links/lib/libcuda.so" ]; then
    cargo build --release --features cuda --lib
    rlib="$(ls -t "$CARGO_TARGET_DIR"/release/deps/libcudarc-*.rlib | head -n 1)"
    nm "$rlib" 2>/dev/null | awk '$1 == "U" { print $2 }' | grep -E '^cu[A-Z]' \
        | grep -vE '^cu(blas|rand)' | sort -u \
        | awk '{ printf "void %s(void) {}\n", $1 }' >"$links/libcuda_stub.c"
    gcc -shared -fPIC -Wl,-soname,libcuda.so.1 -o "$links/lib/libcuda.so" "$links/libcuda_stub.c"
fi
cargo build --release --features "$features" --bin verisample

bin="$CARGO_TARGET_DIR/release/verisample"
mkdir -p dist
strip -o dist/verisample-cuda "$bin"
xz -6 -T0 -c dist/verisample-cuda >dist/verisample-cuda.xz.tmp
mv dist/verisample-cuda.xz.tmp dist/verisample-cuda.xz
rm -f dist/verisample-cuda
ls -l "$bin" dist/verisample-cuda.xz
echo "needs at run time:"
ldd "$bin" | grep -E 'cuda|cublas|curand|nvrtc' || true
