//! `paged_attention`: ragged causal attention of a flattened batch of queries over the paged
//! KV cache, with grouped-query attention (GQA).

use candle_core::backend::BackendStorage;
use candle_core::{CpuStorage, CustomOp3, Layout, Shape, Tensor};
use rayon::prelude::*;

#[cfg(target_arch = "x86_64")]
use crate::linear::Isa;
use crate::segment::exp_shifted_sum;
use crate::{require_cpu, validate_step, Element, KernelError};

const NAME: &str = "paged_attention";

/// Batch metadata for [`paged_attention`] (the fields of `verisample_models::batch::BatchMeta`
/// the kernel needs).
#[derive(Debug, Clone, Copy)]
pub struct PagedAttentionParams<'a> {
    /// New tokens per sequence in this step; they sum to `total_tokens`.
    pub query_lens: &'a [usize],
    /// Tokens in the cache per sequence after this step (past + new), `>= query_lens[i]`.
    pub context_lens: &'a [usize],
    /// Cache blocks of each sequence, in order; must cover `context_lens[i]` tokens.
    pub block_tables: &'a [Vec<u32>],
    /// Softmax scale, usually `head_dim^-0.5`.
    pub scale: f32,
}

/// Attention of `query` `[total_tokens, n_heads, head_dim]` over `key_cache`/`value_cache`
/// `[num_blocks, block_size, n_kv_heads, head_dim]` (already holding this step's keys/values,
/// see [`crate::reshape_and_cache`]); returns `[total_tokens, n_heads, head_dim]` in the query
/// dtype.
///
/// Query `j` of sequence `s` attends to cache positions `0..=context_lens[s] - query_lens[s] + j`.
/// Head `h` reads KV head `h / (n_heads / n_kv_heads)` (GQA). Softmax is the numerically stable
/// one (max subtracted); products and sums accumulate in f32 whatever the storage dtype
/// (f32/f16/bf16; query and cache must share it). Parallel with rayon over decode tokens × KV
/// heads (the query heads of a GQA group together) and over tiles of a prefill chunk's tokens ×
/// KV heads, which read each key and value row once per tile. A query's output is bitwise the
/// same whichever other queries share its step or tile (batch invariance). Memory beyond the
/// output: per worker, a tile's scores, `16 × group × context` f32; and the tiles' outputs,
/// gathered before they are copied into the output (as large as the prefill tokens' part of
/// it).
///
/// Errors: [`KernelError::Invalid`] for inconsistent shapes/metadata (lengths, a block table
/// too short, a block id out of range, `n_heads % n_kv_heads != 0`);
/// [`KernelError::UnsupportedDevice`] off the CPU.
pub fn paged_attention(
    query: &Tensor,
    key_cache: &Tensor,
    value_cache: &Tensor,
    params: &PagedAttentionParams<'_>,
) -> Result<Tensor, KernelError> {
    for t in [query, key_cache, value_cache] {
        require_cpu(NAME, t)?;
    }
    let invalid = |msg: String| KernelError::Invalid { kernel: NAME, msg };
    let (total, n_heads, hd) = query.dims3()?;
    let (num_blocks, block_size, kvh, hd_c) = key_cache.dims4()?;
    if value_cache.dims() != key_cache.dims() {
        return Err(invalid(format!(
            "value cache {:?} differs from key cache {:?}",
            value_cache.dims(),
            key_cache.dims()
        )));
    }
    if hd != hd_c || kvh == 0 || n_heads % kvh != 0 {
        return Err(invalid(format!(
            "query {:?} incompatible with cache {:?}",
            query.dims(),
            key_cache.dims()
        )));
    }
    let tokens = validate_step(NAME, params, total, block_size, num_blocks)?;
    let op = PagedOp {
        tokens,
        block_tables: params.block_tables,
        block_size,
        n_heads,
        kv_heads: kvh,
        head_dim: hd,
        scale: params.scale,
    };
    let out = query.contiguous()?.apply_op3_no_bwd(
        &key_cache.contiguous()?,
        &value_cache.contiguous()?,
        &op,
    )?;
    Ok(out)
}

struct PagedOp<'a> {
    tokens: Vec<(usize, usize)>,
    block_tables: &'a [Vec<u32>],
    block_size: usize,
    n_heads: usize,
    kv_heads: usize,
    head_dim: usize,
    scale: f32,
}

impl PagedOp<'_> {
    /// Decode tokens (a sequence with one new token): one rayon task per (token, KV head),
    /// the `group` query heads that share the KV head computed together, so each key and
    /// value row is read once for all of them (GQA; the decode profile). Runs of
    /// two or more new tokens of one sequence (prefill chunks): one task per (sequence, KV
    /// head, block of [`TILE_QUERIES`] tokens), see [`PagedOp::attend_tile`], then its rows
    /// are copied into place. Per head and query the arithmetic is the same on both paths
    /// (scores by [`dot`], the softmax and the weighted sum of values in increasing
    /// position), so a query's output does not depend on which path or tile computed it.
    fn run<T: Element>(&self, q: &[T], k: &[T], v: &[T]) -> Vec<T> {
        let (hd, nh, kv_heads) = (self.head_dim, self.n_heads, self.kv_heads);
        let group = nh / kv_heads;
        let width = group * hd;
        let mut out = vec![T::from_f32(0.0); self.tokens.len() * nh * hd];
        #[cfg(target_arch = "x86_64")]
        let isa = Isa::detected();
        let tiles = self.tiles();
        let tiled: Vec<(Tile, Vec<T>)> = tiles
            .into_par_iter()
            .map_init(TileScratch::default, |scratch, tile| {
                let mut o = vec![T::from_f32(0.0); tile.len * width];
                #[cfg(target_arch = "x86_64")]
                if isa == Isa::Avx2Fma {
                    // SAFETY: AVX2 and FMA were detected at run time.
                    unsafe { self.attend_tile_avx2(tile, (q, k, v), scratch, &mut o) };
                    return (tile, o);
                }
                self.attend_tile(tile, (q, k, v), scratch, &mut o);
                (tile, o)
            })
            .collect();
        let mut in_tile = vec![false; self.tokens.len()];
        for (tile, o) in &tiled {
            for (j, src) in o.chunks_exact(width).enumerate() {
                let row = (tile.first + j) * kv_heads + tile.kv_head;
                out[row * width..(row + 1) * width].copy_from_slice(src);
                in_tile[tile.first + j] = true;
            }
        }
        out.par_chunks_mut(width).enumerate().for_each_init(
            || GroupScratch {
                qf: vec![0f32; width],
                scores: Vec::new(),
                acc: vec![0f32; width],
                denoms: vec![0f32; group],
            },
            |scratch, (row, o)| {
                if in_tile[row / kv_heads] {
                    return;
                }
                #[cfg(target_arch = "x86_64")]
                if isa == Isa::Avx2Fma {
                    // SAFETY: AVX2 and FMA were detected at run time.
                    return unsafe { self.attend_group_avx2(row, (q, k, v), scratch, o) };
                }
                self.attend_group(row, (q, k, v), scratch, o)
            },
        );
        out
    }

    /// The tiles of this step: for every run of two or more consecutive tokens of one
    /// sequence (`tokens` lists a sequence's new tokens at increasing positions), blocks of
    /// at most [`TILE_QUERIES`] tokens × every KV head.
    fn tiles(&self) -> Vec<Tile> {
        let mut tiles = Vec::new();
        let mut first = 0;
        while first < self.tokens.len() {
            let seq = self.tokens[first].0;
            let run = self.tokens[first..]
                .iter()
                .take_while(|t| t.0 == seq)
                .count();
            if run >= 2 {
                for start in (first..first + run).step_by(TILE_QUERIES) {
                    let len = (first + run - start).min(TILE_QUERIES);
                    tiles.extend((0..self.kv_heads).map(|kv_head| Tile {
                        first: start,
                        len,
                        kv_head,
                    }));
                }
            }
            first += run;
        }
        tiles
    }

    /// Element offset of KV head `kvh` of cache position `p` through `table` (the block
    /// table of one sequence).
    #[inline(always)]
    fn kv_offset(&self, table: &[u32], kvh: usize, p: usize) -> usize {
        let slot = table[p / self.block_size] as usize * self.block_size + p % self.block_size;
        (slot * self.kv_heads + kvh) * self.head_dim
    }

    /// [`PagedOp::attend_tile`] compiled for AVX2 + FMA.
    ///
    /// # Safety
    /// The CPU supports AVX2 and FMA.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn attend_tile_avx2<T: Element>(
        &self,
        tile: Tile,
        qkv: (&[T], &[T], &[T]),
        scratch: &mut TileScratch,
        o: &mut [T],
    ) {
        self.attend_tile(tile, qkv, scratch, o)
    }

    /// Output rows `o` (`[tile.len, group * head_dim]`) of the tile's consecutive tokens of
    /// one sequence for the query heads of KV head `tile.kv_head`: the tile's `tile.len ×
    /// group` query rows visit the keys and values in blocks of [`TILE_KEYS`] positions, so
    /// each key and value row is read from memory once per tile instead of once per query.
    /// Per query row the operations are those of [`PagedOp::attend_group`] in the same order
    /// (scores by [`dot`] over its positions `0..=pos`, the maximum, [`exp_shifted_sum`] over
    /// the whole row, the weighted sum of values in increasing position, the division): the
    /// same bits whatever the tile, the step or the instruction set. Scratch: the tile's
    /// scores, `tile.len × group × (pos_last + 1)` f32 (linear in the context).
    #[inline(always)]
    fn attend_tile<T: Element>(
        &self,
        tile: Tile,
        (q, k, v): (&[T], &[T], &[T]),
        TileScratch {
            qf,
            scores,
            acc,
            offsets,
            denoms,
        }: &mut TileScratch,
        o: &mut [T],
    ) {
        let (hd, kv_heads) = (self.head_dim, self.kv_heads);
        let group = self.n_heads / kv_heads;
        let width = group * hd;
        let rows = tile.len * group;
        let (seq, first_pos) = self.tokens[tile.first];
        let table = &self.block_tables[seq];
        // Query row `r` is token `tile.first + r / group`, head `r % group` of the group; it
        // attends to the `first_pos + r / group + 1` leading positions.
        let keys_of = |r: usize| first_pos + r / group + 1;
        let stride = keys_of(rows - 1);
        qf.clear();
        for j in 0..tile.len {
            let row = (tile.first + j) * kv_heads + tile.kv_head;
            qf.extend(
                q[row * width..(row + 1) * width]
                    .iter()
                    .map(|&x| x.to_f32() * self.scale),
            );
        }
        scores.clear();
        scores.resize(rows * stride, 0.0);
        for k0 in (0..stride).step_by(TILE_KEYS) {
            let k1 = (k0 + TILE_KEYS).min(stride);
            offsets.clear();
            offsets.extend((k0..k1).map(|p| self.kv_offset(table, tile.kv_head, p)));
            for (r, (qr, sr)) in qf
                .chunks_exact(hd)
                .zip(scores.chunks_exact_mut(stride))
                .enumerate()
            {
                let end = keys_of(r).clamp(k0, k1);
                let row = |p: usize| &k[offsets[p - k0]..offsets[p - k0] + hd];
                let mut p = k0;
                while p + 4 <= end {
                    let four = dot4([row(p), row(p + 1), row(p + 2), row(p + 3)], qr);
                    sr[p..p + 4].copy_from_slice(&four);
                    p += 4;
                }
                for (s, p) in sr[p..end].iter_mut().zip(p..) {
                    *s = dot(row(p), qr);
                }
            }
        }
        denoms.clear();
        for (r, sr) in scores.chunks_exact_mut(stride).enumerate() {
            let s = &mut sr[..keys_of(r)];
            let max = s.iter().fold(f32::NEG_INFINITY, |m, &x| m.max(x));
            denoms.push(exp_shifted_sum(s, max));
        }
        acc.clear();
        acc.resize(rows * hd, 0.0);
        for k0 in (0..stride).step_by(TILE_KEYS) {
            let k1 = (k0 + TILE_KEYS).min(stride);
            offsets.clear();
            offsets.extend((k0..k1).map(|p| self.kv_offset(table, tile.kv_head, p)));
            for (r, (ar, sr)) in acc
                .chunks_exact_mut(hd)
                .zip(scores.chunks_exact(stride))
                .enumerate()
            {
                let end = keys_of(r).clamp(k0, k1);
                let row = |p: usize| &v[offsets[p - k0]..offsets[p - k0] + hd];
                let mut p = k0;
                // Four positions per pass over the row, each element's adds in increasing
                // position as one at a time.
                while p + 4 <= end {
                    let (w, r0, r1, r2, r3) =
                        (&sr[p..p + 4], row(p), row(p + 1), row(p + 2), row(p + 3));
                    for ((((a, &x0), &x1), &x2), &x3) in
                        ar.iter_mut().zip(r0).zip(r1).zip(r2).zip(r3)
                    {
                        *a += w[0] * x0.to_f32();
                        *a += w[1] * x1.to_f32();
                        *a += w[2] * x2.to_f32();
                        *a += w[3] * x3.to_f32();
                    }
                    p += 4;
                }
                for (&w, p) in sr[p..end].iter().zip(p..) {
                    for (a, &vx) in ar.iter_mut().zip(row(p)) {
                        *a += w * vx.to_f32();
                    }
                }
            }
        }
        for ((dst, a), &d) in o
            .chunks_exact_mut(hd)
            .zip(acc.chunks_exact(hd))
            .zip(denoms.iter())
        {
            for (dst, &a) in dst.iter_mut().zip(a) {
                *dst = T::from_f32(a / d);
            }
        }
    }

    /// [`PagedOp::attend_group`] compiled for AVX2 + FMA (8-lane dot products, softmax and
    /// weighted sum).
    ///
    /// # Safety
    /// The CPU supports AVX2 and FMA.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn attend_group_avx2<T: Element>(
        &self,
        row: usize,
        qkv: (&[T], &[T], &[T]),
        scratch: &mut GroupScratch,
        o: &mut [T],
    ) {
        self.attend_group(row, qkv, scratch, o)
    }

    /// Output rows of token `row / kv_heads` for the query heads that share KV head
    /// `row % kv_heads` (`o`: `group` heads side by side): attention of each over keys
    /// `0..=pos` of its sequence. Dot products ([`dot`]) and the softmax denominators are
    /// sums in fixed-order partial sums, so that they vectorize; the same code runs on both
    /// instruction sets, so both give the same bits, whatever the batch.
    #[inline(always)]
    fn attend_group<T: Element>(
        &self,
        row: usize,
        (q, k, v): (&[T], &[T], &[T]),
        GroupScratch {
            qf,
            scores,
            acc,
            denoms,
        }: &mut GroupScratch,
        o: &mut [T],
    ) {
        let (hd, kv_heads) = (self.head_dim, self.kv_heads);
        let width = qf.len();
        let (tok, kvh) = (row / kv_heads, row % kv_heads);
        let (seq, pos) = self.tokens[tok];
        let table = &self.block_tables[seq];
        for (dst, &x) in qf.iter_mut().zip(&q[row * width..(row + 1) * width]) {
            *dst = x.to_f32() * self.scale;
        }
        let offset = |p: usize| self.kv_offset(table, kvh, p);
        // `scores` `[group][n]`: head `g`'s scores, then its softmax numerators, whose sum is
        // `denoms[g]`.
        let n = pos + 1;
        scores.clear();
        scores.resize(width / hd * n, 0.0);
        for p in 0..n {
            let off = offset(p);
            let key = &k[off..off + hd];
            for (g, qg) in qf.chunks_exact(hd).enumerate() {
                scores[g * n + p] = dot(key, qg);
            }
        }
        for (s, d) in scores.chunks_exact_mut(n).zip(denoms.iter_mut()) {
            let max = s.iter().fold(f32::NEG_INFINITY, |m, &x| m.max(x));
            *d = exp_shifted_sum(s, max);
        }
        acc.fill(0.0);
        for p in 0..n {
            let off = offset(p);
            let value = &v[off..off + hd];
            for (g, acc) in acc.chunks_exact_mut(hd).enumerate() {
                let w = scores[g * n + p];
                for (a, &vx) in acc.iter_mut().zip(value) {
                    *a += w * vx.to_f32();
                }
            }
        }
        let heads = o.chunks_exact_mut(hd).zip(acc.chunks_exact(hd));
        for ((o, acc), &d) in heads.zip(denoms.iter()) {
            for (dst, &a) in o.iter_mut().zip(acc) {
                *dst = T::from_f32(a / d);
            }
        }
    }
}

/// Per-worker scratch of [`PagedOp::run`]: the scaled f32 queries of one group of heads,
/// their scores `[group][n]`, f32 accumulators and softmax denominators.
struct GroupScratch {
    qf: Vec<f32>,
    scores: Vec<f32>,
    acc: Vec<f32>,
    denoms: Vec<f32>,
}

/// Tokens per tile of a prefill chunk in [`PagedOp::attend_tile`].
const TILE_QUERIES: usize = 16;
/// Cache positions per block of keys (and values) in [`PagedOp::attend_tile`]: 64 rows of
/// `head_dim` 128 in f32 are 32 KiB, an L1 data cache.
const TILE_KEYS: usize = 64;

/// One task of a prefill chunk: tokens `first..first + len` (indices into the step's
/// tokens, all of one sequence, at consecutive positions) × KV head `kv_head`.
#[derive(Debug, Clone, Copy)]
struct Tile {
    first: usize,
    len: usize,
    kv_head: usize,
}

/// Per-worker scratch of [`PagedOp::attend_tile`]: the tile's scaled f32 query rows
/// `[rows][head_dim]`, their scores (then softmax numerators) `[rows][pos_last + 1]`, f32
/// accumulators `[rows][head_dim]`, the element offsets of one block of keys, and the
/// softmax denominators `[rows]`.
#[derive(Default)]
struct TileScratch {
    qf: Vec<f32>,
    scores: Vec<f32>,
    acc: Vec<f32>,
    offsets: Vec<usize>,
    denoms: Vec<f32>,
}

/// `Σ_i k[i] · q[i]` in f32 over [`DOT_LANES`] interleaved partial sums (lane `l` adds the
/// products `i ≡ l mod DOT_LANES` in increasing `i`), summed pairwise at the end, then the
/// products of the tail in order: an order fixed by the length alone (so a query row's scores
/// do not depend on the batch), which the compiler keeps in SIMD registers — a sequential sum
/// is a chain of dependent adds, one per product (the decode profile: 15 % of the
/// time in this loop at batch 16).
fn dot<T: Element>(k: &[T], q: &[f32]) -> f32 {
    let mut acc = [0f32; DOT_LANES];
    let (kc, qc) = (k.chunks_exact(DOT_LANES), q.chunks_exact(DOT_LANES));
    let tail = (kc.remainder(), qc.remainder());
    for (kc, qc) in kc.zip(qc) {
        let (kc, qc) = (
            kc.try_into().expect("whole chunk"),
            qc.try_into().expect("whole chunk"),
        );
        lanes_add_products(&mut acc, kc, qc);
    }
    dot_finish(acc, tail)
}

/// [`dot`] of one query row `q` with four key rows at once: four independent chains of
/// partial sums, so that one key's adds do not wait on the previous ones; each result has
/// the bits of [`dot`]`(k[i], q)`.
#[inline(always)]
fn dot4<T: Element>(k: [&[T]; 4], q: &[f32]) -> [f32; 4] {
    let whole = q.len() / DOT_LANES * DOT_LANES;
    let mut acc = [[0f32; DOT_LANES]; 4];
    for c in (0..whole).step_by(DOT_LANES) {
        let qc: &[f32; DOT_LANES] = q[c..c + DOT_LANES].try_into().expect("whole chunk");
        for (acc, k) in acc.iter_mut().zip(k) {
            let kc: &[T; DOT_LANES] = k[c..c + DOT_LANES].try_into().expect("whole chunk");
            lanes_add_products(acc, kc, qc);
        }
    }
    let mut i = 0;
    acc.map(|acc| {
        i += 1;
        dot_finish(acc, (&k[i - 1][whole..], &q[whole..]))
    })
}

/// One chunk of [`dot`]: lane `l` of `acc` adds `k[l] · q[l]`.
#[inline(always)]
fn lanes_add_products<T: Element>(
    acc: &mut [f32; DOT_LANES],
    k: &[T; DOT_LANES],
    q: &[f32; DOT_LANES],
) {
    for ((a, &kx), &qx) in acc.iter_mut().zip(k).zip(q) {
        *a += kx.to_f32() * qx;
    }
}

/// The end of [`dot`]: the [`DOT_LANES`] partial sums added pairwise, then the products of
/// the tail (`k`, `q` past the last whole chunk) in order.
#[inline(always)]
fn dot_finish<T: Element>(acc: [f32; DOT_LANES], (kt, qt): (&[T], &[f32])) -> f32 {
    let [a, b, c, d, e, f, g, h] = acc;
    let mut s = ((a + e) + (c + g)) + ((b + f) + (d + h));
    for (&kx, &qx) in kt.iter().zip(qt) {
        s += kx.to_f32() * qx;
    }
    s
}

/// Partial sums of [`dot`]: one AVX vector of f32 (two SSE ones).
const DOT_LANES: usize = 8;

impl CustomOp3 for PagedOp<'_> {
    fn name(&self) -> &'static str {
        NAME
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
        s3: &CpuStorage,
        l3: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let shape = Shape::from((self.tokens.len(), self.n_heads, self.head_dim));
        let (a, b, c) = (l1.start_offset(), l2.start_offset(), l3.start_offset());
        let out = match (s1, s2, s3) {
            (CpuStorage::F32(q), CpuStorage::F32(k), CpuStorage::F32(v)) => {
                CpuStorage::F32(self.run(&q[a..], &k[b..], &v[c..]))
            }
            (CpuStorage::F16(q), CpuStorage::F16(k), CpuStorage::F16(v)) => {
                CpuStorage::F16(self.run(&q[a..], &k[b..], &v[c..]))
            }
            (CpuStorage::BF16(q), CpuStorage::BF16(k), CpuStorage::BF16(v)) => {
                CpuStorage::BF16(self.run(&q[a..], &k[b..], &v[c..]))
            }
            (q, k, _) => candle_core::bail!(
                "{NAME}: unsupported dtypes query {:?} / cache {:?} (f32, f16, bf16; must match)",
                q.dtype(),
                k.dtype()
            ),
        };
        Ok((out, shape))
    }
}
