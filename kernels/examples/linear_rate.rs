//! GFLOP/s of [`PackedLinear`] on the decoder projections of the bench's random ~100 M
//! Qwen2-VL (`scripts/bench_vs_transformers.py --models 100m`: hidden 768, MLP 2048, 12 heads
//! and 2 KV heads of 64): fused q/k/v 768 → 1024, o 768 → 768, fused gate/up 768 → 4096,
//! down 2048 → 768, at a given number of rows (a decode step of `m` sequences).
//!
//! ```sh
//! RAYON_NUM_THREADS=1 cargo run --release -p verisample-kernels --example linear_rate -- 16 [14]
//! ```
//!
//! Prints, per shape and for the whole layer, the time per call (best of the repetitions) and
//! `2 · m · k · n / time` in GFLOP/s. Weights and inputs are [`lcg_uniform`] values. Time is
//! the CPU time of the thread that runs the product (`CLOCK_THREAD_CPUTIME_ID`, the loop runs
//! inside a one-thread rayon pool) when `RAYON_NUM_THREADS=1`, so that a shared machine's
//! other jobs do not count; wall-clock time otherwise.

use candle_core::{Device, Tensor};
use verisample_kernels::{lcg_uniform, PackedLinear};

/// `(name, k, n)` of one decoder layer's projections.
const SHAPES: [(&str, usize, usize); 4] = [
    ("qkv", 768, 1024),
    ("o", 768, 768),
    ("gate_up", 768, 4096),
    ("down", 2048, 768),
];
/// Layers of the 100m decoder: each is timed on its own weights, so that the weights stream
/// from memory as in a decode step (14 × 6.1 M f32 weights ≫ the caches). A second argument
/// sets another count (1: the weights of one layer, 24 MB, stay in L3 between repetitions).
const LAYERS: usize = 14;
const REPS: usize = 20;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let m: usize = std::env::args().nth(1).map_or(Ok(16), |a| a.parse())?;
    let n_layers: usize = std::env::args().nth(2).map_or(Ok(LAYERS), |a| a.parse())?;
    let layers = (0..n_layers)
        .map(|l| {
            SHAPES
                .iter()
                .enumerate()
                .map(|(i, &(_, k, n))| {
                    let seed = (l * SHAPES.len() + i) as u64;
                    let w = Tensor::from_vec(lcg_uniform(seed, n * k, 0.05), (n, k), &Device::Cpu)?;
                    Ok(PackedLinear::pack(&[(w, None)])?)
                })
                .collect::<Result<Vec<_>, Box<dyn std::error::Error>>>()
        })
        .collect::<Result<Vec<_>, _>>()?;
    let inputs: Vec<Vec<f32>> = SHAPES
        .iter()
        .map(|&(_, k, _)| lcg_uniform(99, m * k, 1.0))
        .collect();
    let threads = rayon::current_num_threads();
    let clock = if threads == 1 {
        libc::CLOCK_THREAD_CPUTIME_ID
    } else {
        libc::CLOCK_MONOTONIC
    };
    let now = || {
        let mut t = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `t` is a valid timespec to write; both clocks exist on Linux.
        unsafe { libc::clock_gettime(clock, &mut t) };
        t.tv_sec as f64 + t.tv_nsec as f64 * 1e-9
    };
    rayon::scope(|_| measure(m, &layers, &inputs, now));
    Ok(())
}

/// Times every projection of every layer `REPS` times and prints the best rates.
fn measure(m: usize, layers: &[Vec<PackedLinear>], inputs: &[Vec<f32>], now: impl Fn() -> f64) {
    let n_layers = layers.len();
    let mut best = [f64::INFINITY; SHAPES.len()];
    let mut best_step = f64::INFINITY;
    for _ in 0..REPS {
        let mut step = 0.0;
        let mut per = [0.0; SHAPES.len()];
        for layer in layers {
            for (i, (lin, x)) in layer.iter().zip(inputs).enumerate() {
                let t = now();
                std::hint::black_box(lin.matmul_f32(std::hint::black_box(x)));
                let s = now() - t;
                per[i] += s;
                step += s;
            }
        }
        for (b, p) in best.iter_mut().zip(per) {
            *b = b.min(p / n_layers as f64);
        }
        best_step = best_step.min(step);
    }
    let gflops = |k: usize, n: usize, s: f64| 2.0 * (m * k * n) as f64 / s / 1e9;
    println!("m = {m}, threads = {}", rayon::current_num_threads());
    println!("(time: thread CPU time at 1 thread, wall clock otherwise)");
    for (&(name, k, n), &s) in SHAPES.iter().zip(&best) {
        println!(
            "{name:>8} {k:>5} -> {n:>5}: {:>8.1} us  {:>6.1} GFLOP/s",
            s * 1e6,
            gflops(k, n, s)
        );
    }
    let macs: usize = SHAPES.iter().map(|&(_, k, n)| k * n).sum::<usize>() * n_layers;
    println!(
        "   {n_layers} layers: {:>8.1} us  {:>6.1} GFLOP/s",
        best_step * 1e6,
        2.0 * (m * macs) as f64 / best_step / 1e9
    );
}
