//! The vision tower's memory estimate ([`vision_forward_bytes`]) against what the tower
//! really allocates: a counting global allocator records the peak bytes live during one
//! `encode_images` of each fixture family (Qwen2-VL full attention, Qwen2.5-VL windows +
//! gated MLP, Qwen3-VL learned positions + DeepStack, GLM-4.1V resampled positions + its
//! convolution head). The estimate must cover the peak (it
//! decides which images are refused before they can exhaust memory) without overstating it
//! by more than half (else it refuses images that would fit).

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use candle_core::{DType, Device, Tensor};
use common::fixture_dir;
use verisample_models::{vision_forward_bytes, VisionInputs, VlModel};

/// The system allocator, counting live bytes and their high-water mark.
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = System.alloc(layout);
        if !p.is_null() {
            let now = LIVE.fetch_add(layout.size(), Ordering::SeqCst) + layout.size();
            PEAK.fetch_max(now, Ordering::SeqCst);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout);
        LIVE.fetch_sub(layout.size(), Ordering::SeqCst);
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Peak bytes allocated beyond those live before `f` runs.
fn peak_during<T>(f: impl FnOnce() -> T) -> (T, usize) {
    let base = LIVE.load(Ordering::SeqCst);
    PEAK.store(base, Ordering::SeqCst);
    let out = f();
    (out, PEAK.load(Ordering::SeqCst) - base)
}

// One test function: the allocator's counters are global to the process, so two towers
// measured on parallel test threads would count each other.
#[test]
fn estimate_covers_the_measured_peak_of_every_family() {
    // 72 × 96 patches (1008 × 1344 px): large enough that the per-patch terms dominate the
    // per-worker tiles of the attention kernel.
    let grid = [1, 72, 96];
    let n = grid[1] * grid[2];
    let threads = rayon::current_num_threads();
    for family in ["qwen2_vl", "qwen2_5_vl", "qwen3_vl", "glm4v"] {
        let m = VlModel::load(&fixture_dir(family), DType::F32, &Device::Cpu).unwrap();
        let spec = m.vision_spec().qwen().unwrap().clone();
        let row = spec.in_channels * spec.temporal_patch_size * spec.patch_size.pow(2);
        let data: Vec<f32> = (0..n * row)
            .map(|i| ((i % 251) as f32 / 125.0) - 1.0)
            .collect();
        let inputs = VisionInputs {
            pixel_values: Tensor::from_vec(data, (n, row), &Device::Cpu).unwrap(),
            grid_thw: vec![grid],
        };
        // Warm-up: rayon's pool and candle's lazily built state are not per-image costs.
        m.encode_images(&inputs).unwrap();
        let (out, peak) = peak_during(|| m.encode_images(&inputs).unwrap());
        assert_eq!(
            out.embeds.dims(),
            &[n / 4, spec.out_hidden_size],
            "{family}"
        );
        drop(out);
        let estimate = vision_forward_bytes(&spec, n, DType::F32, threads) as usize;
        println!("{family}: {n} patches, measured peak {peak} B, estimate {estimate} B");
        assert!(
            estimate >= peak,
            "{family}: estimate {estimate} B < peak {peak} B"
        );
        assert!(
            estimate * 2 <= peak * 3,
            "{family}: estimate {estimate} B > 1.5 × peak {peak} B"
        );
    }
    // Linear in the patches: doubling the image doubles the per-patch part exactly.
    let spec = VlModel::load(&fixture_dir("qwen2_vl"), DType::F32, &Device::Cpu)
        .unwrap()
        .vision_spec()
        .qwen()
        .unwrap()
        .clone();
    let at = |p: usize| vision_forward_bytes(&spec, p, DType::F32, 2);
    assert_eq!(at(4 * n) - at(2 * n), 2 * (at(2 * n) - at(n)));
}
