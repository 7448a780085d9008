//! GFLOP/s of the native [`segment_attention`] at Qwen2-VL's vision widths (16 heads of 80)
//! on one image of `n` patches (the vision tower's full attention).
//!
//! ```sh
//! RAYON_NUM_THREADS=1 cargo run --release -p verisample-kernels --example segment_rate -- 4096 [reps]
//! ```
//!
//! Prints the time per call (best of the repetitions) and `4 · n² · heads · head_dim / time`
//! (the two products' multiply-adds) in GFLOP/s. Inputs are [`lcg_uniform`] values. Time is
//! the CPU time of the thread that runs the kernel (`CLOCK_THREAD_CPUTIME_ID`, in a one-thread
//! rayon pool) when `RAYON_NUM_THREADS=1`, so that a shared machine's other jobs do not
//! count; wall-clock time otherwise.

use candle_core::{Device, Tensor};
use verisample_kernels::{lcg_uniform, segment_attention, SegmentAttentionParams};

const HEADS: usize = 16;
const HEAD_DIM: usize = 80;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let n: usize = std::env::args().nth(1).map_or(Ok(4096), |a| a.parse())?;
    let reps: usize = std::env::args().nth(2).map_or(Ok(3), |a| a.parse())?;
    let t = |seed| {
        Tensor::from_vec(
            lcg_uniform(seed, n * HEADS * HEAD_DIM, 2.0),
            (n, HEADS, HEAD_DIM),
            &Device::Cpu,
        )
    };
    let (q, k, v) = (t(1)?, t(2)?, t(3)?);
    let segments = [(0, n)];
    let params = SegmentAttentionParams {
        segments: &segments,
        scale: 1.0 / (HEAD_DIM as f32).sqrt(),
    };
    let clock = if rayon::current_num_threads() == 1 {
        libc::CLOCK_THREAD_CPUTIME_ID
    } else {
        libc::CLOCK_MONOTONIC
    };
    let now = || {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `ts` is a valid timespec for clock_gettime to fill.
        unsafe { libc::clock_gettime(clock, &mut ts) };
        ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
    };
    let pool = rayon::ThreadPoolBuilder::new().build()?;
    let best = pool.install(|| -> Result<f64, verisample_kernels::KernelError> {
        let mut best = f64::INFINITY;
        for _ in 0..reps {
            let t0 = now();
            let out = segment_attention(&q, &k, &v, &params)?;
            best = best.min(now() - t0);
            drop(out);
        }
        Ok(best)
    })?;
    let flops = 4.0 * (n * n * HEADS * HEAD_DIM) as f64;
    println!(
        "n {n}, {HEADS} heads of {HEAD_DIM}, {} threads: {:.3} s per call, {:.1} GFLOP/s",
        rayon::current_num_threads(),
        best,
        flops / best * 1e-9
    );
    Ok(())
}
