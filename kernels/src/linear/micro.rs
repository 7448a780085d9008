//! The micro-kernels of [`super::PackedLinear`]: per instruction set, `R` rows of `x` × one
//! or two adjacent panels of [`PANEL_COLS`] columns over a depth block, accumulators in
//! registers, one fused multiply-add per step in increasing `k` (a multiply then an add on
//! the scalar path).

use std::sync::OnceLock;

use half::bf16;

use super::PANEL_COLS;

/// A micro-kernel call's register tile: up to `rows` rows of `x` × `panels` adjacent panels
/// of [`PANEL_COLS`] columns. The tile changes which registers hold an output element, never
/// the operations that compute it, so every tile gives the same bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Tile {
    /// Rows of `x` per call at most (the tile-major copy of `x` is grouped by as many).
    pub(crate) rows: usize,
    /// Adjacent panels per call at most.
    pub(crate) panels: usize,
}

/// Instruction set of a kernel, detected once per process: [`Isa::detected`] for the 8-lane
/// (4-lane) kernels of attention, [`Isa::widest`] for the linear's micro-kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Isa {
    /// x86-64 AVX2 + FMA: 8-lane f32 vectors, fused multiply-add.
    #[cfg(target_arch = "x86_64")]
    Avx2Fma,
    /// x86-64 AVX-512F: 16-lane f32 vectors (a panel row in one register), fused
    /// multiply-add (per lane the same rounding as AVX2's).
    #[cfg(target_arch = "x86_64")]
    Avx512,
    /// AArch64 NEON: 4-lane f32 vectors, fused multiply-add (the same rounding as AVX2's).
    #[cfg(target_arch = "aarch64")]
    Neon,
    /// Portable Rust: a multiply, then an add.
    Scalar,
}

impl Isa {
    /// The AVX2 + FMA / NEON / scalar instruction set of this CPU (detected on the first
    /// call): never [`Isa::Avx512`], whose kernels only the linear has.
    pub(crate) fn detected() -> Self {
        static ISA: OnceLock<Isa> = OnceLock::new();
        *ISA.get_or_init(Self::detect)
    }

    /// The linear micro-kernel's instruction set: [`Isa::Avx512`] where the CPU has AVX-512F,
    /// else [`Isa::detected`].
    pub(crate) fn widest() -> Self {
        #[cfg(target_arch = "x86_64")]
        {
            static AVX512: OnceLock<bool> = OnceLock::new();
            if *AVX512.get_or_init(|| is_x86_feature_detected!("avx512f")) {
                return Self::Avx512;
            }
        }
        Self::detected()
    }

    /// The micro-kernel's register tile.
    ///
    /// AVX-512: [`super::TILE_ROWS`] (12) rows × 2 panels, 24 accumulator registers + 2 weight
    /// vectors of the 32, the broadcasts folded into the fused multiply-adds: 2 + 12 loads per
    /// 24 multiply-adds. Its first version, 16 rows × 1 panel (1 + 16 loads per 16, each
    /// weight read once by a decode step of 16 sequences), was bound by the loads: with `x` and
    /// the weights in L1, one thread of an Ice Lake Xeon at 2.6 GHz reached 86 GFLOP/s with
    /// it and 142 with 12 × 2 (14 × 2 and 9 × 3: no better); over the 100m decoder's 14
    /// layers, weights from memory, 16 rows ran 3–8 % faster in 12 + 4 rows of 12 × 2
    /// (`kernels/examples/linear_rate.rs`). AVX2: 6 × 2 accumulators + 2 weight vectors + 1
    /// broadcast, 15 of the 16 registers (the BLIS Haswell kernel's 6 × 16), 1 panel; NEON:
    /// 6 × 4 accumulators of the 32, 1 panel; scalar as AVX2.
    pub(crate) fn tile(self) -> Tile {
        match self {
            #[cfg(target_arch = "x86_64")]
            Self::Avx512 => Tile {
                rows: super::TILE_ROWS,
                panels: 2,
            },
            _ => Tile { rows: 6, panels: 1 },
        }
    }

    #[cfg(target_arch = "x86_64")]
    fn detect() -> Self {
        if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
            Self::Avx2Fma
        } else {
            Self::Scalar
        }
    }

    #[cfg(target_arch = "aarch64")]
    fn detect() -> Self {
        if std::arch::is_aarch64_feature_detected!("neon") {
            Self::Neon
        } else {
            Self::Scalar
        }
    }

    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    fn detect() -> Self {
        Self::Scalar
    }
}

/// Storage types of packed weights, widened to f32 in the micro-kernel.
pub(super) trait PanelElem: Copy + Send + Sync {
    fn to_f32(self) -> f32;

    /// Loads 8 consecutive weights at `p` as f32 lanes.
    ///
    /// # Safety
    /// `p..p + 8` must be readable; the CPU must support AVX2.
    #[cfg(target_arch = "x86_64")]
    unsafe fn load8(p: *const Self) -> std::arch::x86_64::__m256;

    /// Loads 16 consecutive weights at `p` as f32 lanes.
    ///
    /// # Safety
    /// `p..p + 16` must be readable; the CPU must support AVX-512F.
    #[cfg(target_arch = "x86_64")]
    unsafe fn load16(p: *const Self) -> std::arch::x86_64::__m512;

    /// Loads 4 consecutive weights at `p` as f32 lanes.
    ///
    /// # Safety
    /// `p..p + 4` must be readable; the CPU must support NEON.
    #[cfg(target_arch = "aarch64")]
    unsafe fn load4(p: *const Self) -> std::arch::aarch64::float32x4_t;
}

impl PanelElem for f32 {
    fn to_f32(self) -> f32 {
        self
    }

    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn load8(p: *const Self) -> std::arch::x86_64::__m256 {
        std::arch::x86_64::_mm256_loadu_ps(p)
    }

    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn load16(p: *const Self) -> std::arch::x86_64::__m512 {
        std::arch::x86_64::_mm512_loadu_ps(p)
    }

    #[cfg(target_arch = "aarch64")]
    #[inline(always)]
    unsafe fn load4(p: *const Self) -> std::arch::aarch64::float32x4_t {
        std::arch::aarch64::vld1q_f32(p)
    }
}

impl PanelElem for bf16 {
    fn to_f32(self) -> f32 {
        bf16::to_f32(self)
    }

    /// bf16 is the high half of an f32: widen the 16-bit lanes and shift them up.
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn load8(p: *const Self) -> std::arch::x86_64::__m256 {
        use std::arch::x86_64::*;
        let h = _mm_loadu_si128(p.cast::<__m128i>());
        _mm256_castsi256_ps(_mm256_slli_epi32::<16>(_mm256_cvtepu16_epi32(h)))
    }

    /// As `load8`: widen the 16-bit lanes and shift them up.
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn load16(p: *const Self) -> std::arch::x86_64::__m512 {
        use std::arch::x86_64::*;
        let h = _mm256_loadu_si256(p.cast::<__m256i>());
        _mm512_castsi512_ps(_mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(h)))
    }

    /// As `load8`: widen the 16-bit lanes and shift them up.
    #[cfg(target_arch = "aarch64")]
    #[inline(always)]
    unsafe fn load4(p: *const Self) -> std::arch::aarch64::float32x4_t {
        use std::arch::aarch64::*;
        let h = vld1_u16(p.cast::<u16>());
        vreinterpretq_f32_u32(vshlq_n_u32::<16>(vmovl_u16(h)))
    }
}

/// The depth blocks of one micro-kernel call's panels, each with the block to prefetch (as
/// long; the block the task multiplies next, or the same one).
pub(super) type Blocks<'a, W> = [(&'a [W], &'a [W])];

/// Accumulators `acc` (`rows` rows of `blocks.len()` adjacent panels, `ldc` apart) += `x`
/// `[kb][rows]` (the rows' depth block, packed step-major: the broadcasts of a step are
/// adjacent) × each block's `w` `[kb][PANEL_COLS]`, prefetching each block's `pf`, for `rows`
/// and `blocks.len()` within the ISA's [`Isa::tile`] (the AVX2 kernel's accumulators spill to
/// memory beyond); the order per element never depends on the tile.
///
/// Panics if `x` is too short, a block's length differs from the first's, `rows` exceeds the
/// tile, or (AVX-512) `blocks.len()` does; the caller guarantees that `acc` is writable at
/// `r * ldc + c` for `r < rows`, `c < blocks.len() * PANEL_COLS` (see
/// [`super::PackedLinear::run`]).
#[inline(always)]
pub(super) fn micro_rows<W: PanelElem>(
    isa: Isa,
    rows: usize,
    x: &[f32],
    blocks: &Blocks<'_, W>,
    acc: *mut f32,
    ldc: usize,
) {
    macro_rules! tile {
        ($f:ident $args:tt, $($r:literal)*) => {
            match rows {
                $($r => $f::<W, $r> $args,)*
                _ => panic!("{rows} rows in a tile of {:?}", isa.tile()),
            }
        };
    }
    #[cfg(target_arch = "x86_64")]
    if isa == Isa::Avx512 {
        return tile!(avx512(x, blocks, acc, ldc), 1 2 3 4 5 6 7 8 9 10 11 12);
    }
    for (i, &(w, pf)) in blocks.iter().enumerate() {
        // SAFETY: panel `i`'s columns lie inside the caller's guarantee on `acc`.
        let acc = unsafe { acc.add(i * PANEL_COLS) };
        tile!(micro(isa, x, w, pf, acc, ldc), 1 2 3 4 5 6);
    }
}

/// `R` accumulator rows at `acc` (`ldc` apart) += `x` `[kb][R]` × the 1 or 2 adjacent panels'
/// blocks, with AVX-512 (see [`micro_rows`]).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn avx512<W: PanelElem, const R: usize>(
    x: &[f32],
    blocks: &Blocks<'_, W>,
    acc: *mut f32,
    ldc: usize,
) {
    let Some(&(w0, _)) = blocks.first() else {
        return;
    };
    let kb = w0.len() / PANEL_COLS;
    let same = blocks
        .iter()
        .all(|(w, pf)| w.len() == w0.len() && pf.len() == w0.len());
    assert!(x.len() >= kb * R && same);
    let w = |i: usize| blocks[i].0.as_ptr();
    let pf = |i: usize| blocks[i].1.as_ptr();
    // SAFETY: `micro_rows` runs this only under `Isa::Avx512` (AVX-512F detected); the assert
    // above bounds every read of `x` and the blocks; `acc` is the caller's.
    unsafe {
        match blocks.len() {
            1 => micro_avx512::<W, R, 1>(x.as_ptr(), [w(0)], [pf(0)], kb, acc, ldc),
            2 => micro_avx512::<W, R, 2>(x.as_ptr(), [w(0), w(1)], [pf(0), pf(1)], kb, acc, ldc),
            n => panic!("{n} panels in a tile of {:?}", Isa::Avx512.tile()),
        }
    }
}

/// `R` accumulator rows at `acc` (`ldc` apart) += `x` `[kb][R]` × `w` `[kb][PANEL_COLS]`,
/// with the weights `pf` (as many as `w`) prefetched along the way.
#[inline(always)]
fn micro<W: PanelElem, const R: usize>(
    isa: Isa,
    x: &[f32],
    w: &[W],
    pf: &[W],
    acc: *mut f32,
    ldc: usize,
) {
    let kb = w.len() / PANEL_COLS;
    assert!(x.len() >= kb * R && pf.len() == w.len());
    match isa {
        // SAFETY: AVX2 and FMA were detected; the assert above bounds every read of `x` and
        // `w`; `acc` is the caller's (see `micro_rows`).
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2Fma => unsafe {
            micro_avx2::<W, R>(x.as_ptr(), w.as_ptr(), pf.as_ptr(), kb, acc, ldc)
        },
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => unreachable!("`micro_rows` runs AVX-512 tiles in `avx512`"),
        // SAFETY: NEON was detected; the assert above bounds every read; `acc` as above. (No
        // prefetch: the intrinsic is not stable on AArch64.)
        #[cfg(target_arch = "aarch64")]
        Isa::Neon => unsafe { micro_neon::<W, R>(x.as_ptr(), w.as_ptr(), kb, acc, ldc) },
        Isa::Scalar => {
            for (kk, wk) in w.chunks_exact(PANEL_COLS).enumerate() {
                for r in 0..R {
                    let a = x[kk * R + r];
                    // SAFETY: the caller's guarantee on `acc` (see `micro_rows`).
                    let row =
                        unsafe { std::slice::from_raw_parts_mut(acc.add(r * ldc), PANEL_COLS) };
                    for (c, &wv) in row.iter_mut().zip(wk) {
                        *c += a * wv.to_f32();
                    }
                }
            }
        }
    }
}

/// The AVX2 + FMA micro-kernel: `R × 2` accumulator vectors in registers over `kb` steps.
///
/// # Safety
/// AVX2 and FMA available; `x` readable at `kk * R + r` for `r < R`, `kk < kb`; `w` holds
/// `kb * PANEL_COLS` weights; `acc` writable at `r * ldc + c` for `r < R`, `c < PANEL_COLS`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn micro_avx2<W: PanelElem, const R: usize>(
    x: *const f32,
    w: *const W,
    pf: *const W,
    kb: usize,
    c: *mut f32,
    ldc: usize,
) {
    use std::arch::x86_64::*;
    let mut lo = [_mm256_setzero_ps(); R];
    let mut hi = [_mm256_setzero_ps(); R];
    for r in 0..R {
        lo[r] = _mm256_loadu_ps(c.add(r * ldc));
        hi[r] = _mm256_loadu_ps(c.add(r * ldc + 8));
    }
    for kk in 0..kb {
        // Into L2 (not L1, which holds this block and the rows of `x`); a line per step is
        // more than enough for bf16 panels too (two steps per line).
        _mm_prefetch::<_MM_HINT_T1>(pf.add(kk * PANEL_COLS).cast::<i8>());
        let b0 = W::load8(w.add(kk * PANEL_COLS));
        let b1 = W::load8(w.add(kk * PANEL_COLS + 8));
        for r in 0..R {
            let a = _mm256_set1_ps(*x.add(kk * R + r));
            lo[r] = _mm256_fmadd_ps(a, b0, lo[r]);
            hi[r] = _mm256_fmadd_ps(a, b1, hi[r]);
        }
    }
    for r in 0..R {
        _mm256_storeu_ps(c.add(r * ldc), lo[r]);
        _mm256_storeu_ps(c.add(r * ldc + 8), hi[r]);
    }
}

/// The AVX-512F micro-kernel: `R × P` accumulator vectors (a panel row each) in registers
/// over `kb` steps; per step `P` weight vectors, `R` broadcasts and `R × P` fused
/// multiply-adds, per lane the same operations in the same order as [`micro_avx2`].
///
/// # Safety
/// AVX-512F available; `x` readable at `kk * R + r` for `r < R`, `kk < kb`; `w[j]` and
/// `pf[j]` hold `kb * PANEL_COLS` weights each; `c` writable at `r * ldc + i` for `r < R`,
/// `i < P * PANEL_COLS`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn micro_avx512<W: PanelElem, const R: usize, const P: usize>(
    x: *const f32,
    w: [*const W; P],
    pf: [*const W; P],
    kb: usize,
    c: *mut f32,
    ldc: usize,
) {
    use std::arch::x86_64::*;
    let mut acc = [[_mm512_setzero_ps(); P]; R];
    for (r, row) in acc.iter_mut().enumerate() {
        for (j, a) in row.iter_mut().enumerate() {
            *a = _mm512_loadu_ps(c.add(r * ldc + j * PANEL_COLS));
        }
    }
    for kk in 0..kb {
        let mut b = [_mm512_setzero_ps(); P];
        for (j, b) in b.iter_mut().enumerate() {
            // Into L2, as in `micro_avx2`: the step's line of each panel to come.
            _mm_prefetch::<_MM_HINT_T1>(pf[j].add(kk * PANEL_COLS).cast::<i8>());
            *b = W::load16(w[j].add(kk * PANEL_COLS));
        }
        for (r, row) in acc.iter_mut().enumerate() {
            let a = _mm512_set1_ps(*x.add(kk * R + r));
            for (acc, &b) in row.iter_mut().zip(&b) {
                *acc = _mm512_fmadd_ps(a, b, *acc);
            }
        }
    }
    for (r, row) in acc.iter().enumerate() {
        for (j, a) in row.iter().enumerate() {
            _mm512_storeu_ps(c.add(r * ldc + j * PANEL_COLS), *a);
        }
    }
}

/// The NEON micro-kernel: `R × 4` accumulator vectors (24 of the 32 registers at `R = 6`) over
/// `kb` steps, each a fused multiply-add in increasing `k` as in [`micro_avx2`], so both give
/// bitwise the same products. Type-checked for `aarch64-unknown-linux-gnu`; not yet run.
///
/// # Safety
/// NEON available; `x` readable at `kk * R + r` for `r < R`, `kk < kb`; `w` holds
/// `kb * PANEL_COLS` weights; `c` writable at `r * ldc + j` for `r < R`, `j < PANEL_COLS`.
#[cfg(target_arch = "aarch64")]
#[target_feature(enable = "neon")]
unsafe fn micro_neon<W: PanelElem, const R: usize>(
    x: *const f32,
    w: *const W,
    kb: usize,
    c: *mut f32,
    ldc: usize,
) {
    use std::arch::aarch64::*;
    const V: usize = PANEL_COLS / 4;
    let mut a = [[vdupq_n_f32(0.0); V]; R];
    for (r, row) in a.iter_mut().enumerate() {
        for (v, lane) in row.iter_mut().enumerate() {
            *lane = vld1q_f32(c.add(r * ldc + 4 * v));
        }
    }
    for kk in 0..kb {
        let mut b = [vdupq_n_f32(0.0); V];
        for (v, bv) in b.iter_mut().enumerate() {
            *bv = W::load4(w.add(kk * PANEL_COLS + 4 * v));
        }
        for (r, row) in a.iter_mut().enumerate() {
            let xr = vdupq_n_f32(*x.add(kk * R + r));
            for (lane, &bv) in row.iter_mut().zip(&b) {
                *lane = vfmaq_f32(*lane, xr, bv);
            }
        }
    }
    for (r, row) in a.iter().enumerate() {
        for (v, &lane) in row.iter().enumerate() {
            vst1q_f32(c.add(r * ldc + 4 * v), lane);
        }
    }
}
