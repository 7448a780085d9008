//! Probes of the kernels on synthetic steps, shared by `verisample doctor` (on the device under
//! test) and the tests (on the CPU): [`ProbeStep`], a ragged step over a scattered pool run on
//! any attention path or by the direct reference; [`attention_invariance`], whether a sequence's
//! attention rows are bitwise the same alone, inside batches of other sequences and chunked
//! differently; [`rows_invariance`], the same question for a row-wise operation such as a
//! linear layer.

use candle_core::{DType, Device, Tensor};

use crate::{
    lcg_uniform, max_abs_diff, paged_attention_reference, AttentionPath, KernelError,
    PagedAttentionParams, PagedStep,
};

/// Tokens per cache block of the probe steps: the engine's default, a multiple of 32 as
/// flash-attn's paged kernels need.
pub const PROBE_BLOCK_SIZE: usize = 32;
const BS: usize = PROBE_BLOCK_SIZE;
const KVH: usize = 2;
const NH: usize = 8;
const HD: usize = 64;

/// Deterministic pseudo-random floats in [-2, 2) ([`lcg_uniform`]).
fn lcg(seed: u64, n: usize) -> Vec<f32> {
    lcg_uniform(seed, n, 2.0)
}

/// A ragged step over a pool of blocks of [`PROBE_BLOCK_SIZE`] tokens, 8 query heads over 2
/// KV heads of 64: `(query_len, context_len)` per sequence, block tables in a scattered order
/// (descending ids, rotated by a third), the slots of the new tokens.
#[derive(Debug, Clone)]
pub struct ProbeStep {
    query_lens: Vec<usize>,
    context_lens: Vec<usize>,
    /// Each sequence's block table.
    pub tables: Vec<Vec<u32>>,
    /// The slot of each new token, in step order.
    pub slots: Vec<u32>,
    /// Blocks in the pool (every sequence's, plus one).
    pub num_blocks: usize,
}

/// Values per cache slot of a probe pool (`kv_heads · head_dim`).
pub const PROBE_ROW: usize = KVH * HD;
/// Values per query row of a probe step (`heads · head_dim`).
pub const PROBE_QUERY_ROW: usize = NH * HD;

impl ProbeStep {
    /// The step of `shape` (`(query_len, context_len)` per sequence, `query_len ≤
    /// context_len`, `context_len ≥ 1`).
    pub fn new(shape: &[(usize, usize)]) -> Self {
        let num_blocks: usize = shape.iter().map(|s| s.1.div_ceil(BS)).sum::<usize>() + 1;
        let mut ids: Vec<u32> = (0..num_blocks as u32).rev().collect();
        ids.rotate_left(num_blocks / 3);
        let (mut tables, mut slots) = (Vec::new(), Vec::new());
        for &(q, c) in shape {
            let table: Vec<u32> = ids.drain(..c.div_ceil(BS)).collect();
            slots.extend((c - q..c).map(|p| table[p / BS] * BS as u32 + (p % BS) as u32));
            tables.push(table);
        }
        Self {
            query_lens: shape.iter().map(|s| s.0).collect(),
            context_lens: shape.iter().map(|s| s.1).collect(),
            tables,
            slots,
            num_blocks,
        }
    }

    /// Values in the pool (`num_blocks · block_size · kv_heads · head_dim`).
    pub fn pool_len(&self) -> usize {
        self.num_blocks * BS * PROBE_ROW
    }

    /// The slot of position `p` of sequence `s`.
    fn slot(&self, s: usize, p: usize) -> usize {
        self.tables[s][p / BS] as usize * BS + p % BS
    }

    fn params(&self) -> PagedAttentionParams<'_> {
        PagedAttentionParams {
            query_lens: &self.query_lens,
            context_lens: &self.context_lens,
            block_tables: &self.tables,
            scale: 1.0 / (HD as f32).sqrt(),
        }
    }

    /// Writes `k`/`v` (`[new tokens, 2, 64]`) into fresh pools pre-filled with `fill` (host
    /// f32 values) and attends with `q` (`[new tokens, 8, 64]`), on `path` and `device`, in
    /// `dtype`. Returns (key pool, attention) in f32.
    ///
    /// Errors: the path's kernel errors.
    #[allow(clippy::too_many_arguments)]
    pub fn run(
        &self,
        path: AttentionPath,
        dtype: DType,
        device: &Device,
        fill: &[f32],
        k: &[f32],
        v: &[f32],
        q: &[f32],
    ) -> Result<(Vec<f32>, Vec<f32>), KernelError> {
        let total = self.slots.len();
        let t = |x: &[f32], dims: &[usize]| Tensor::from_slice(x, dims, device)?.to_dtype(dtype);
        let pool = [self.num_blocks, BS, KVH, HD];
        let (kc, vc) = (t(fill, &pool)?, t(fill, &pool)?);
        let step = PagedStep::new(
            path,
            self.params(),
            &self.slots,
            BS,
            self.num_blocks,
            device,
        )?;
        step.write_cache(
            &t(k, &[total, KVH, HD])?,
            &t(v, &[total, KVH, HD])?,
            &kc,
            &vc,
        )?;
        let out = step.attend(&t(q, &[total, NH, HD])?, &kc, &vc)?;
        let flat = |x: &Tensor| x.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>();
        Ok((flat(&kc)?, flat(&out)?))
    }

    /// The independent reference of [`ProbeStep::run`] on the CPU in f32: the pool written by a
    /// host loop over the slots, attention by [`paged_attention_reference`] (plain loops, no
    /// code shared with the kernels under test).
    ///
    /// Errors: candle errors.
    pub fn reference(
        &self,
        fill: &[f32],
        k: &[f32],
        v: &[f32],
        q: &[f32],
    ) -> Result<(Vec<f32>, Vec<f32>), KernelError> {
        let (mut kc, mut vc) = (fill.to_vec(), fill.to_vec());
        for (i, &slot) in self.slots.iter().enumerate() {
            let d = slot as usize * PROBE_ROW;
            kc[d..d + PROBE_ROW].copy_from_slice(&k[i * PROBE_ROW..(i + 1) * PROBE_ROW]);
            vc[d..d + PROBE_ROW].copy_from_slice(&v[i * PROBE_ROW..(i + 1) * PROBE_ROW]);
        }
        let pool = (self.num_blocks, BS, KVH, HD);
        let t = |x: &[f32]| Tensor::from_slice(x, pool, &Device::Cpu);
        let out = paged_attention_reference(
            &Tensor::from_slice(q, (self.slots.len(), NH, HD), &Device::Cpu)?,
            &t(&kc)?,
            &t(&vc)?,
            &self.params(),
        )?;
        Ok((kc, out.flatten_all()?.to_vec1()?))
    }
}

/// One comparison of an invariance probe: what was varied, and the largest `|Δ|` of the probed
/// rows against their reference run (0: bitwise equal; `+∞` on a NaN or a length mismatch).
#[derive(Debug, Clone, PartialEq)]
pub struct Variation {
    /// E.g. `batch of 64`, `chunks 10 + 9`, `decoded token by token`.
    pub what: String,
    /// [`max_abs_diff`] of the probed rows.
    pub max_abs_diff: f32,
}

/// The variations that changed a probed row (empty: bitwise invariant).
pub fn differing(variations: &[Variation]) -> Vec<&Variation> {
    variations
        .iter()
        .filter(|v| v.max_abs_diff != 0.0)
        .collect()
}

/// The probe sequences of [`attention_invariance`]: a decode and a chunk over short contexts, a
/// decode whose context crosses a 256-position block, and a chunk that straddles position 512.
const PROBES: [(usize, usize); 4] = [(1, 45), (6, 29), (1, 300), (19, 530)];

/// Filler sequence `i` of a batch: 1 to 13 new tokens over 20 to 669 positions.
fn filler(i: usize) -> (usize, usize) {
    (1 + (i % 3) * (i % 5), 20 + (i * 37) % 650)
}

/// The attention rows of the first `probes` sequences of a step of `shape`, probe `i` being
/// probe `first + i` of [`PROBES`]: its context's keys and values at each position, and its
/// queries, are the same values in every step (seeded by its id and the position), whatever the
/// slots; everything else in the step differs from step to step.
fn probe_rows(
    (path, dtype, device): (AttentionPath, DType, &Device),
    shape: &[(usize, usize)],
    probes: usize,
    first: usize,
) -> Result<Vec<Vec<f32>>, KernelError> {
    let step = ProbeStep::new(shape);
    let total = step.slots.len();
    let seed = 11 + 4 * shape.len() as u64;
    let mut fill = lcg(seed, step.pool_len());
    let mut k = lcg(seed + 1, total * PROBE_ROW);
    let mut v = lcg(seed + 2, total * PROBE_ROW);
    let mut q = lcg(seed + 3, total * PROBE_QUERY_ROW);
    // Position `p` of probe `id` holds key = value = `kv(id, p)`; its query at `p` is `qv(id, p)`.
    let kv = |id: usize, p: usize| lcg(1000 * id as u64 + p as u64 + 7, PROBE_ROW);
    let qv = |id: usize, p: usize| lcg(5000 * id as u64 + p as u64 + 9, PROBE_QUERY_ROW);
    let mut row = 0;
    let mut out_rows = Vec::new();
    for (s, &(ql, c)) in shape.iter().enumerate() {
        if s < probes {
            let id = first + s;
            for p in 0..c {
                let d = step.slot(s, p) * PROBE_ROW;
                fill[d..d + PROBE_ROW].copy_from_slice(&kv(id, p));
            }
            for (j, p) in (c - ql..c).enumerate() {
                let r = row + j;
                k[r * PROBE_ROW..(r + 1) * PROBE_ROW].copy_from_slice(&kv(id, p));
                v[r * PROBE_ROW..(r + 1) * PROBE_ROW].copy_from_slice(&kv(id, p));
                q[r * PROBE_QUERY_ROW..(r + 1) * PROBE_QUERY_ROW].copy_from_slice(&qv(id, p));
            }
            out_rows.push(row..row + ql);
        }
        row += ql;
    }
    let (_, out) = step.run(path, dtype, device, &fill, &k, &v, &q)?;
    Ok(out_rows
        .into_iter()
        .map(|r| out[r.start * PROBE_QUERY_ROW..r.end * PROBE_QUERY_ROW].to_vec())
        .collect())
}

/// Whether attention on `path` gives a sequence's rows bitwise the same whatever else is in
/// the step: each probe sequence (decodes and prefill chunks over contexts of 29 to 530
/// positions) computed alone is compared with the same sequence inside steps of 7, 16, 64 and
/// 100 sequences of other lengths (100: more than one batched call of the portable path), and
/// the 19-token chunk with the same tokens computed as chunks of 10 + 9 and decoded one token at
/// a time. In `dtype` on `device`.
///
/// Errors: the path's kernel errors.
pub fn attention_invariance(
    path: AttentionPath,
    dtype: DType,
    device: &Device,
) -> Result<Vec<Variation>, KernelError> {
    let on = (path, dtype, device);
    let mut alone = Vec::new();
    for (id, &probe) in PROBES.iter().enumerate() {
        alone.extend(probe_rows(on, &[probe], 1, id)?);
    }
    let mut variations = Vec::new();
    for n in [7, 16, 64, 100] {
        let mut shape = PROBES.to_vec();
        shape.extend((PROBES.len()..n).map(filler));
        let rows = probe_rows(on, &shape, PROBES.len(), 0)?;
        variations.push(Variation {
            what: format!("batch of {n}"),
            max_abs_diff: max_abs_diff(&rows.concat(), &alone.concat()),
        });
    }
    // Probe 3, (19, 530): positions 511..530 as chunks 10 + 9 beside a filler, then one token
    // per step.
    let part = |ql: usize, c: usize| -> Result<Vec<f32>, KernelError> {
        let rows = probe_rows(on, &[(ql, c), filler(ql + c)], 1, 3)?;
        Ok(rows.concat())
    };
    let chunked = [part(10, 521)?, part(9, 530)?].concat();
    variations.push(Variation {
        what: "chunks 10 + 9".into(),
        max_abs_diff: max_abs_diff(&chunked, &alone[3]),
    });
    let decoded = (512..=530)
        .map(|c| part(1, c))
        .collect::<Result<Vec<_>, _>>()?
        .concat();
    variations.push(Variation {
        what: "decoded token by token".into(),
        max_abs_diff: max_abs_diff(&decoded, &alone[3]),
    });
    Ok(variations)
}

/// Whether `forward`, a row-wise operation such as a linear layer, gives rows 0 and 1 of `x`
/// (`[N, k]`, `N ≥ 300`) bitwise the same alone as among the first 2, 7, 16, 64, 129 and 300
/// rows (129: past one tile of the portable linear).
///
/// Errors: `forward`'s.
pub fn rows_invariance(
    forward: &dyn Fn(&Tensor) -> candle_core::Result<Tensor>,
    x: &Tensor,
) -> candle_core::Result<Vec<Variation>> {
    let row = |t: &Tensor, i: usize| -> candle_core::Result<Vec<f32>> {
        t.narrow(0, i, 1)?
            .to_dtype(DType::F32)?
            .flatten_all()?
            .to_vec1()
    };
    let alone = [
        row(&forward(&x.narrow(0, 0, 1)?)?, 0)?,
        row(&forward(&x.narrow(0, 1, 1)?)?, 0)?,
    ]
    .concat();
    [2, 7, 16, 64, 129, 300]
        .into_iter()
        .map(|n| {
            let y = forward(&x.narrow(0, 0, n)?)?;
            let rows = [row(&y, 0)?, row(&y, 1)?].concat();
            Ok(Variation {
                what: format!("{n} rows"),
                max_abs_diff: max_abs_diff(&rows, &alone),
            })
        })
        .collect()
}
