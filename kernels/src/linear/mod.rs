//! [`PackedLinear`]: the CPU linear layer `y = x Wᵀ + b`, with the weight packed once (at load)
//! into the micro-kernel's panel layout, and a reduction order that does not depend on the
//! number of rows: row `i` of `y` is bitwise the same whether it is computed alone or among 63
//! other rows.
//!
//! Layout: `W` `[n, k]` (PyTorch `nn.Linear.weight`) is cut into panels of [`PANEL_COLS`]
//! output columns; a panel is stored `[k][PANEL_COLS]`, the last one padded with zeros. The
//! micro-kernel (BLIS's register blocking; Goto & van de Geijn, "Anatomy of high-performance
//! matrix multiplication", 2008) keeps up to [`TILE_ROWS`] rows × one or two panels (two
//! with AVX-512) of accumulators in registers and walks `k` in blocks of [`DEPTH_BLOCK`], the
//! blocks of the panels staying in L1 while the rows of a block of [`ROW_BLOCK`] rows of `x`
//! pass over them, and that block of `x` staying in L2 while a group of panels passes over it.
//!
//! Batch invariance by construction: every output element is `acc = 0; for k in 0..K { acc =
//! x[i][k] · w[j][k] + acc }` in increasing `k` (a fused multiply-add on the SIMD path, a
//! multiply then an add on the scalar one), plus the bias at the end. Partial sums leave the
//! registers only as f32 stores and reloads, which are exact; no path splits `k` differently
//! for a different row count. The SIMD path is chosen once per process (runtime detection:
//! AVX-512F, else AVX2 + FMA on x86-64, NEON on AArch64 — all fused multiply-adds, so bitwise
//! the same products; the scalar loop elsewhere), so two calls on one machine always use the
//! same arithmetic. Work is split over blocks of rows and groups of output panels with
//! rayon, never over `k`.

use candle_core::backend::BackendStorage;
use candle_core::{CpuStorage, CustomOp1, DType, Layout, Shape, Storage, Tensor};
use half::bf16;
use rayon::prelude::*;

use crate::{require_cpu, KernelError};

mod micro;
mod tiled;

pub use tiled::{TiledLinear, LINEAR_TILE_ROWS};

pub(crate) use micro::Isa;
use micro::{micro_rows, PanelElem};

const NAME: &str = "packed_linear";

/// Output columns per packed panel: one 16-lane f32 vector (AVX-512), two 8-lane (AVX2).
pub const PANEL_COLS: usize = 16;
/// Rows of `x` per micro-kernel call at most, over every instruction set (see
/// [`PackedLinear::tile_rows`]).
pub const TILE_ROWS: usize = 12;
/// Depth (`k`) per block: a block of a panel (`DEPTH_BLOCK × PANEL_COLS` weights, 16 KiB in
/// f32) stays in L1 while all rows pass over it.
pub const DEPTH_BLOCK: usize = 256;
/// Rows of `x` per rayon task: its block of `x` (`ROW_BLOCK × DEPTH_BLOCK` f32, 96 KiB) stays
/// in L2 while a group of panels passes over it, instead of every panel streaming all of `x`
/// from memory (which made large `m` — a vision tower's thousands of patches — memory bound).
pub const ROW_BLOCK: usize = 96;
// A row block is whole tiles of every instruction set (12 rows AVX-512, 6 AVX2/NEON/scalar):
// the tile-major copy of `x` is indexed by tile from each block's start.
const _: () = assert!(ROW_BLOCK.is_multiple_of(TILE_ROWS) && ROW_BLOCK.is_multiple_of(6));
/// Panels per rayon task at least (128 output columns; their depth blocks, 64 KiB in bf16,
/// share L2 with the block of `x`).
const PANEL_GROUP: usize = 8;
/// Multiply-adds below which a rayon task is not split further (≈ 0.1 ms of one core): small
/// `m` (decode) takes more panels per task.
const TASK_MACS: usize = 1 << 18;
/// Floats of `x` regrouped at a time (1 MiB; see [`tile_major`]): a whole decode step's `x`,
/// a bounded copy of a prefill's.
const X_CHUNK: usize = 1 << 18;
/// Rows up to which a task walks its panels in storage order (see [`PackedLinear::run`]).
const SEQUENTIAL_ROWS: usize = 4;

/// Weights in panel layout, in their storage type.
#[derive(Debug, Clone)]
enum Panels {
    F32(Vec<f32>),
    Bf16(Vec<bf16>),
}

/// A linear layer `y = x Wᵀ + b` on the CPU with `W` packed once into panels (see the module
/// docs): f32 weights, or bf16 weights widened to f32 in registers; f32 accumulation always.
#[derive(Debug, Clone)]
pub struct PackedLinear {
    in_dim: usize,
    out_dim: usize,
    panels: Panels,
    bias: Option<Vec<f32>>,
}

impl PackedLinear {
    /// Packs the weights `parts[i].0` `[n_i, k]` (all on the CPU, one `k`) as one layer of
    /// `Σ n_i` outputs, in order: a fused projection (q/k/v, gate/up) whose output columns
    /// are the parts' side by side. Biases `parts[i].1` `[n_i]` are optional per part (a part
    /// without one adds nothing).
    ///
    /// Storage: bf16 when every weight value is a bf16 value — bf16 weights, and f32 (or f16)
    /// weights widened from a bf16 checkpoint — since the kernel widens bf16 to f32 exactly in
    /// registers, the products are bitwise those of f32 panels at half the memory; f32
    /// otherwise. The panels are filled straight from the tensors' storage, so packing holds
    /// the tensors plus the panels, no third copy.
    ///
    /// Errors: [`KernelError::UnsupportedDevice`] off the CPU; [`KernelError::Invalid`] for
    /// no parts, differing `k`, a bias of the wrong length, or another dtype.
    pub fn pack(parts: &[(Tensor, Option<Tensor>)]) -> Result<Self, KernelError> {
        let invalid = |msg: String| KernelError::Invalid { kernel: NAME, msg };
        let Some((first, _)) = parts.first() else {
            return Err(invalid("no weights to pack".into()));
        };
        let in_dim = first.dims2()?.1;
        let mut bias = Vec::new();
        let mut weights = Vec::with_capacity(parts.len());
        let any_bias = parts.iter().any(|(_, b)| b.is_some());
        for (w, b) in parts {
            require_cpu(NAME, w)?;
            let (n, k) = w.dims2()?;
            if k != in_dim {
                return Err(invalid(format!("weights of {k} and {in_dim} inputs")));
            }
            if !matches!(w.dtype(), DType::F32 | DType::F16 | DType::BF16) {
                return Err(invalid(format!("unsupported weight dtype {:?}", w.dtype())));
            }
            weights.push(w.contiguous()?);
            if any_bias {
                match b {
                    Some(b) if b.dims() == [n] => {
                        bias.extend(b.to_dtype(DType::F32)?.to_vec1::<f32>()?)
                    }
                    Some(b) => return Err(invalid(format!("bias {:?} for {n} outputs", b.dims()))),
                    None => bias.extend(std::iter::repeat_n(0.0, n)),
                }
            }
        }
        let out_dim = weights
            .iter()
            .map(|w| w.dim(0))
            .sum::<candle_core::Result<_>>()?;
        let all_bf16 = weights
            .iter()
            .map(|w| with_values(w, |v| v.exactly_bf16()))
            .collect::<Result<Vec<_>, _>>()?
            .into_iter()
            .all(|exact| exact);
        let panels = if all_bf16 {
            Panels::Bf16(to_panels(&weights, out_dim, in_dim, |v, i| v.bf16(i))?)
        } else {
            Panels::F32(to_panels(&weights, out_dim, in_dim, |v, i| v.f32(i))?)
        };
        Ok(Self {
            in_dim,
            out_dim,
            panels,
            bias: any_bias.then_some(bias),
        })
    }

    /// Rows of `x` per micro-kernel call on this CPU (the detected instruction set's tile:
    /// 12 with AVX-512, 6 otherwise; at most [`TILE_ROWS`]). The bits of a row never depend
    /// on it.
    pub fn tile_rows() -> usize {
        Isa::widest().tile().rows
    }

    /// Input features `k`.
    pub fn in_dim(&self) -> usize {
        self.in_dim
    }

    /// Output features `n` (all parts together).
    pub fn out_dim(&self) -> usize {
        self.out_dim
    }

    /// The dtype the weights are stored in: `BF16`, or `F32` (f32 and f16 weights).
    pub fn weight_dtype(&self) -> DType {
        match self.panels {
            Panels::F32(_) => DType::F32,
            Panels::Bf16(_) => DType::BF16,
        }
    }

    /// Rows `rows` of `W` `[n, k]` gathered out of the panels, as `[rows.len(), k]` row-major
    /// f32 (bf16 weights widened exactly): an embedding lookup in a tied LM head's weights, so
    /// that a model keeps one copy of its `[vocab, hidden]` matrix instead of two.
    ///
    /// Errors: [`KernelError::Invalid`] for a row `>= n`, naming it.
    pub fn weight_rows(&self, rows: &[u32]) -> Result<Vec<f32>, KernelError> {
        let k = self.in_dim;
        let mut out = Vec::with_capacity(rows.len() * k);
        for &row in rows {
            let j = row as usize;
            if j >= self.out_dim {
                return Err(KernelError::Invalid {
                    kernel: NAME,
                    msg: format!("row {row} of a weight with {} rows", self.out_dim),
                });
            }
            let (start, c) = ((j / PANEL_COLS) * k * PANEL_COLS, j % PANEL_COLS);
            let column = (0..k).map(|kk| start + kk * PANEL_COLS + c);
            match &self.panels {
                Panels::F32(w) => out.extend(column.map(|i| w[i])),
                Panels::Bf16(w) => out.extend(column.map(|i| w[i].to_f32())),
            }
        }
        Ok(out)
    }

    /// `x` `[.., k]` (CPU; f32, f16 or bf16) → `[.., n]` in `x`'s dtype, computed in f32.
    ///
    /// Errors: [`KernelError::UnsupportedDevice`] off the CPU; [`KernelError::Invalid`] when
    /// the last dimension is not `k`.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor, KernelError> {
        require_cpu(NAME, x)?;
        let dims = x.dims();
        if dims.last() != Some(&self.in_dim) {
            return Err(KernelError::Invalid {
                kernel: NAME,
                msg: format!("input {dims:?} for {} inputs", self.in_dim),
            });
        }
        let rows = x.elem_count() / self.in_dim;
        let mut out_dims = dims.to_vec();
        if let Some(last) = out_dims.last_mut() {
            *last = self.out_dim;
        }
        let y = x
            .contiguous()?
            .reshape((rows, self.in_dim))?
            .apply_op1_no_bwd(self)?;
        Ok(y.reshape(out_dims)?)
    }

    /// `y` `[m, n]` (row-major f32) of `x` `[m, k]` (row-major f32).
    ///
    /// Panics if `x.len()` is not a multiple of `k`.
    pub fn matmul_f32(&self, x: &[f32]) -> Vec<f32> {
        assert_eq!(
            x.len() % self.in_dim.max(1),
            0,
            "x is not [m, {}]",
            self.in_dim
        );
        self.matmul_with(Isa::widest(), x)
    }

    /// [`Self::matmul_f32`] with the micro-kernel of `isa` (which the CPU must support).
    fn matmul_with(&self, isa: Isa, x: &[f32]) -> Vec<f32> {
        let m = x.len() / self.in_dim.max(1);
        match &self.panels {
            Panels::F32(p) => self.run(isa, x, m, p),
            Panels::Bf16(p) => self.run(isa, x, m, p),
        }
    }

    /// [`Self::matmul_f32`] of `x` stored in a half type: widened, multiplied, rounded once.
    fn through_f32<T: Copy>(
        &self,
        x: &[T],
        widen: impl Fn(T) -> f32,
        narrow: impl Fn(f32) -> T,
    ) -> Vec<T> {
        let x: Vec<f32> = x.iter().map(|&v| widen(v)).collect();
        self.matmul_f32(&x).into_iter().map(narrow).collect()
    }

    /// Computes `y` `[m, n]`: rayon over tasks of [`ROW_BLOCK`] rows × a group of panels,
    /// row block major, so that one worker's consecutive tasks reuse the same block of `x`
    /// from its caches. Within a task the depth blocks are the outer loop: the rows × depth
    /// block of `x` stays in L2 while every panel of the group passes over it. Accumulators
    /// live in `y` itself between depth blocks (f32 stores and reloads: exact), so the order
    /// per element is the same for every `m` and every tiling. `x` is first regrouped tile by
    /// tile ([`tile_major`]).
    ///
    /// The task walks its group in units of the tile's adjacent panels (two with AVX-512, the
    /// last unit of an odd group one; one elsewhere). While the micro-kernel multiplies one
    /// depth block of a unit, it prefetches (into L2) the blocks the task multiplies next (the
    /// next unit of its group at the same depth, else the group's first unit one depth block
    /// on), so that the stream of weights from memory overlaps the arithmetic (decode: each
    /// weight serves a few rows only and comes from DRAM). Prefetching reads nothing into the
    /// result.
    ///
    /// With at most [`SEQUENTIAL_ROWS`] rows a task walks its units one after the other
    /// instead, each whole (still prefetching the next blocks): the weights then stream in
    /// storage order (two adjacent panels side by side with AVX-512). The order per element is
    /// the same in both walks (increasing depth blocks), so the bits are too.
    ///
    /// Measured with `kernels/examples/linear_rate.rs` (14 layers of the 100m decoder, thread
    /// CPU time, 1 thread, AVX-512 machine at load average ~7, alternated runs): at m = 16 the
    /// depth-major walk 131–134 GFLOP/s against 131–136 in storage order (but 152 against 116
    /// with one layer's weights in L3); at m = 1 storage order 14.1–15.8 ms for the 14 layers
    /// against 16.1–17.5 depth-major; at m = 8 about the same (72–78 GFLOP/s).
    fn run<W: PanelElem>(&self, isa: Isa, x: &[f32], m: usize, panels: &[W]) -> Vec<f32> {
        let (k, n) = (self.in_dim, self.out_dim);
        let n_panels = n.div_ceil(PANEL_COLS);
        // Row stride of the accumulators: the padded width, so that a last partial panel
        // writes its 16 columns in place; compacted to `n` at the end when it differs.
        let ldy = n_panels * PANEL_COLS;
        let mut y = vec![0f32; m * ldy];
        if m == 0 || n == 0 {
            y.truncate(m * n);
            return y;
        }
        let block = ROW_BLOCK.min(m);
        let tile = isa.tile();
        let panel_len = k * PANEL_COLS;
        let group = PANEL_GROUP.max(TASK_MACS / (block * k * PANEL_COLS).max(1));
        let groups = n_panels.div_ceil(group);
        let depth_blocks = k.div_ceil(DEPTH_BLOCK);
        // A few rows: nothing of `x` to keep in L2, only the weights to stream (see the doc
        // comment).
        let sequential = block <= SEQUENTIAL_ROWS;
        // `x` is regrouped a chunk of row blocks at a time, so that the copy stays small next
        // to `x` (a prefill's thousands of rows); at least one row block per rayon thread, so
        // that a large `k` (one block per `X_CHUNK`) does not leave all but one core idle.
        let blocks = (X_CHUNK / k.max(1) / block).max(rayon::current_num_threads());
        let chunk = blocks.max(1) * block;
        let mut xt = vec![0f32; chunk.min(m) * k];
        let out = OutPtr(y.as_mut_ptr());
        // The depth block `k0..k0 + kb` of panel `p`.
        let depth_block = |p: usize, k0: usize, kb: usize| {
            let start = p * panel_len + k0 * PANEL_COLS;
            &panels[start..start + kb * PANEL_COLS]
        };
        for c0 in (0..m).step_by(chunk) {
            let cm = chunk.min(m - c0);
            let xt = &mut xt[..cm * k];
            tile_major(&x[c0 * k..(c0 + cm) * k], k, tile.rows, xt);
            let xt = &*xt;
            (0..cm.div_ceil(block) * groups)
                .into_par_iter()
                .for_each(|task| {
                    // Rows r0..r0 + rows of the chunk: rows c0 + r0.. of `x` and `y`.
                    let (r0, p0) = ((task / groups) * block, (task % groups) * group);
                    let rows = block.min(cm - r0);
                    let group = p0..(p0 + group).min(n_panels);
                    // Units of `tile.panels` adjacent panels (the last one may have fewer).
                    let units = group.len().div_ceil(tile.panels);
                    let steps = units * depth_blocks;
                    // Step `s` of the task: (first panel of its unit, first `k` of its depth
                    // block).
                    let at = |s: usize| {
                        let (u, d) = if sequential {
                            (s / depth_blocks, s % depth_blocks)
                        } else {
                            (s % units, s / units)
                        };
                        (group.start + u * tile.panels, d * DEPTH_BLOCK)
                    };
                    for s in 0..steps {
                        let (p, k0) = at(s);
                        let kb = DEPTH_BLOCK.min(k - k0);
                        let width = tile.panels.min(group.end - p);
                        // Each panel's block, with the block of the same place in the unit
                        // multiplied next to prefetch, or this one again (nothing new fetched)
                        // at the end, or when the next one is shorter.
                        let (p1, k1) = at(s + 1);
                        let next = s + 1 < steps && k1 + kb <= k;
                        let mut unit = [(&panels[..0], &panels[..0]); 2];
                        for (i, slot) in unit[..width].iter_mut().enumerate() {
                            let w = depth_block(p + i, k0, kb);
                            let pf = match next {
                                true => depth_block((p1 + i).min(group.end - 1), k1, kb),
                                false => w,
                            };
                            *slot = (w, pf);
                        }
                        for t0 in (r0..r0 + rows).step_by(tile.rows) {
                            let tr = tile.rows.min(r0 + rows - t0);
                            // SAFETY: the task alone owns rows c0 + r0.. (`rows` of them) ×
                            // the columns of its panels; `(c0 + t0) * ldy + p * PANEL_COLS`
                            // plus `tr - 1` rows of `ldy` and `width` panels of columns lies
                            // inside `y` (`m * ldy`).
                            let acc = unsafe { out.at((c0 + t0) * ldy + p * PANEL_COLS) };
                            let xs = &xt[t0 * k + k0 * tr..];
                            micro_rows(isa, tr, xs, &unit[..width], acc, ldy);
                        }
                    }
                    if let Some(b) = &self.bias {
                        let (c_lo, c_hi) =
                            (group.start * PANEL_COLS, (group.end * PANEL_COLS).min(n));
                        for r in c0 + r0..c0 + r0 + rows {
                            // SAFETY: as above, columns c_lo..c_hi of the task's own row r.
                            let dst = unsafe { out.slice(r * ldy + c_lo, c_hi - c_lo) };
                            for (d, b) in dst.iter_mut().zip(&b[c_lo..c_hi]) {
                                *d += b;
                            }
                        }
                    }
                });
        }
        if ldy != n {
            for r in 1..m {
                y.copy_within(r * ldy..r * ldy + n, r * n);
            }
            y.truncate(m * n);
        }
        y
    }
}

/// Rows `x` `[rows, k]` regrouped into `out` (as long) by tiles of `tile` rows (the last one
/// shorter), each tile `[k][tile rows]`: tile `t` starts at `t * tile * k`, so a
/// micro-kernel's broadcasts of one step are adjacent floats. Reading `x` in place instead, the rows of a tile lie `k` floats
/// apart, which for `k` a multiple of 1024 (the 100m decoder's `down`, `k` = 2048) puts all
/// of them in one L1 set.
fn tile_major(x: &[f32], k: usize, tile: usize, out: &mut [f32]) {
    let regroup = |(dst, rows): (&mut [f32], &[f32])| {
        let tr = rows.len() / k;
        for (r, row) in rows.chunks_exact(k).enumerate() {
            for (slot, &v) in dst[r..].iter_mut().step_by(tr).zip(row) {
                *slot = v;
            }
        }
    };
    if x.len() <= ROW_BLOCK * k {
        out.chunks_mut(tile * k)
            .zip(x.chunks(tile * k))
            .for_each(regroup);
    } else {
        let tiles = out.par_chunks_mut(tile * k).zip(x.par_chunks(tile * k));
        tiles.for_each(regroup);
    }
}

/// The output pointer shared by the panel tasks (each writes its own columns).
#[derive(Clone, Copy)]
struct OutPtr(*mut f32);

impl OutPtr {
    /// The pointer to element `i`.
    ///
    /// # Safety
    /// `i` within the buffer.
    unsafe fn at(self, i: usize) -> *mut f32 {
        self.0.add(i)
    }

    /// The `len` floats from `start`.
    ///
    /// # Safety
    /// `start + len` within the buffer, which outlives `'a`; no other live reference to them.
    unsafe fn slice<'a>(self, start: usize, len: usize) -> &'a mut [f32] {
        std::slice::from_raw_parts_mut(self.0.add(start), len)
    }
}

// SAFETY: tasks write disjoint elements (see `PackedLinear::run`).
unsafe impl Send for OutPtr {}
// SAFETY: as above.
unsafe impl Sync for OutPtr {}

impl CustomOp1 for PackedLinear {
    fn name(&self) -> &'static str {
        NAME
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let rows = l.dims()[0];
        let start = l.start_offset();
        let len = rows * self.in_dim;
        let y = match s {
            CpuStorage::F32(x) => CpuStorage::F32(self.matmul_f32(&x[start..start + len])),
            CpuStorage::F16(x) => CpuStorage::F16(self.through_f32(
                &x[start..start + len],
                half::f16::to_f32,
                half::f16::from_f32,
            )),
            CpuStorage::BF16(x) => CpuStorage::BF16(self.through_f32(
                &x[start..start + len],
                bf16::to_f32,
                bf16::from_f32,
            )),
            other => candle_core::bail!("{NAME}: unsupported input dtype {:?}", other.dtype()),
        };
        Ok((y, Shape::from((rows, self.out_dim))))
    }
}

/// A contiguous CPU weight's values, borrowed from its storage.
#[derive(Clone, Copy)]
enum Values<'a> {
    F32(&'a [f32]),
    F16(&'a [half::f16]),
    Bf16(&'a [bf16]),
}

impl Values<'_> {
    /// Whether every value is a bf16 value (widening it back loses nothing).
    fn exactly_bf16(self) -> bool {
        match self {
            Values::F32(v) => v.iter().all(|x| x.to_bits() & 0xffff == 0),
            Values::F16(v) => v.iter().all(|x| x.to_f32().to_bits() & 0xffff == 0),
            Values::Bf16(_) => true,
        }
    }

    /// Value `i` as f32 (exact).
    fn f32(self, i: usize) -> f32 {
        match self {
            Values::F32(v) => v[i],
            Values::F16(v) => v[i].to_f32(),
            Values::Bf16(v) => v[i].to_f32(),
        }
    }

    /// Value `i` as bf16 (exact for values that pass [`Values::exactly_bf16`]).
    fn bf16(self, i: usize) -> bf16 {
        match self {
            Values::Bf16(v) => v[i],
            other => bf16::from_f32(other.f32(i)),
        }
    }
}

/// Calls `f` with the values of `w` (contiguous, on the CPU, f32/f16/bf16) without copying.
fn with_values<R>(w: &Tensor, f: impl FnOnce(Values<'_>) -> R) -> Result<R, KernelError> {
    let (storage, layout) = w.storage_and_layout();
    let range = layout.start_offset()..layout.start_offset() + w.elem_count();
    match &*storage {
        Storage::Cpu(CpuStorage::F32(v)) => Ok(f(Values::F32(&v[range]))),
        Storage::Cpu(CpuStorage::F16(v)) => Ok(f(Values::F16(&v[range]))),
        Storage::Cpu(CpuStorage::BF16(v)) => Ok(f(Values::Bf16(&v[range]))),
        _ => Err(KernelError::Invalid {
            kernel: NAME,
            msg: format!("weight of dtype {:?} on {:?}", w.dtype(), w.device()),
        }),
    }
}

/// Weights `parts[i]` `[n_i, k]` (contiguous) stacked as `[n, k]` → panels
/// `[⌈n / PANEL_COLS⌉][k][PANEL_COLS]`, zero-padded, each value read with `get` (a closure,
/// inlined: through a function pointer, one call per weight was most of a model's load time).
fn to_panels<W: Copy + Default>(
    parts: &[Tensor],
    n: usize,
    k: usize,
    get: impl Fn(Values<'_>, usize) -> W + Copy,
) -> Result<Vec<W>, KernelError> {
    let mut out = vec![W::default(); n.div_ceil(PANEL_COLS) * k * PANEL_COLS];
    let mut row0 = 0;
    for part in parts {
        let rows = part.dim(0)?;
        with_values(part, |values| {
            for r in 0..rows {
                let j = row0 + r;
                let (p, c) = (j / PANEL_COLS, j % PANEL_COLS);
                let panel = &mut out[p * k * PANEL_COLS..(p + 1) * k * PANEL_COLS];
                for kk in 0..k {
                    panel[kk * PANEL_COLS + c] = get(values, r * k + kk);
                }
            }
        })?;
        row0 += rows;
    }
    Ok(out)
}

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use super::*;
    use candle_core::Device;

    /// Every SIMD micro-kernel this CPU runs gives bitwise the AVX2 kernel's products (one
    /// fused multiply-add per step, increasing `k`), at tile-straddling row counts, f32 and
    /// bf16 weights, over an even and an odd number of panels (AVX-512's two-panel tile then
    /// ends in a one-panel unit: 5 panels in one group; 9 in one group at a few rows, in a
    /// group of 8 and one of 1 from 16 rows); the
    /// scalar kernel (multiply, then add) is close but not bitwise.
    #[test]
    fn avx512_and_avx2_kernels_agree_bitwise() {
        if !(is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma")) {
            return;
        }
        let k = DEPTH_BLOCK + 45;
        let bits = |v: Vec<f32>| v.into_iter().map(f32::to_bits).collect::<Vec<_>>();
        for (dtype, n) in [DType::F32, DType::BF16]
            .into_iter()
            .flat_map(|d| [(d, 4 * PANEL_COLS + 5), (d, 8 * PANEL_COLS + 5)])
        {
            let w = Tensor::from_vec(crate::lcg_uniform(1, n * k, 2.0), (n, k), &Device::Cpu)
                .and_then(|w| w.to_dtype(dtype))
                .expect("weight");
            let b = Tensor::from_vec(crate::lcg_uniform(2, n, 2.0), n, &Device::Cpu).ok();
            let lin = PackedLinear::pack(&[(w, b)]).expect("pack");
            for m in [1, 5, 16, 17, 23, 40, 64, ROW_BLOCK + 1, 2 * ROW_BLOCK + 7] {
                let x = crate::lcg_uniform(3, m * k, 2.0);
                let avx2 = lin.matmul_with(Isa::Avx2Fma, &x);
                if is_x86_feature_detected!("avx512f") {
                    let avx512 = lin.matmul_with(Isa::Avx512, &x);
                    let at = format!("{dtype:?}, n = {n}, m = {m}");
                    assert_eq!(bits(avx512), bits(avx2.clone()), "{at}");
                }
                let scalar = lin.matmul_with(Isa::Scalar, &x);
                assert_ne!(
                    bits(scalar.clone()),
                    bits(avx2.clone()),
                    "{dtype:?}, m = {m}"
                );
                let close = scalar.iter().zip(&avx2).all(|(s, a)| (s - a).abs() < 1e-3);
                assert!(close, "{dtype:?}, m = {m}");
            }
        }
    }
}
