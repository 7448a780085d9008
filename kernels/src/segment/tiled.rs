//! The AVX-512 path of [`super::segment_attention`]: the same blockwise attention with an
//! online softmax, with its two products as register-tiled micro-kernels instead of `gemm`
//! calls (which pack both operands on every call and use 8-lane vectors).
//!
//! Once per call, per head, the keys are packed transposed in strips of [`STRIP`] keys
//! (`[strip][head_dim][STRIP]`, zero-padded past the last row) and the values head-major
//! (`[row][head_dim padded to 16]`). A task (head × [`TILE_Q`] queries of one segment) packs
//! its queries scaled by the softmax scale, then visits the segment's keys in blocks of
//! [`TILE_K`]:
//! - `S = Q Kᵀ`: tiles of [`QK_ROWS`] queries × one strip (two 16-lane vectors), `head_dim`
//!   fused multiply-adds per element in registers. A block that does not start on a strip
//!   boundary starts at the strip holding its first key; the leading columns (keys of the
//!   previous segment) are computed and never read;
//! - the online softmax over the block's own columns ([`super::online_softmax`]'s body,
//!   compiled for AVX-512);
//! - `acc += P V`: tiles of [`PV_ROWS`] queries × up to [`PV_VECS`] vectors of `head_dim`
//!   (Qwen2-VL's 80 is five), one fused multiply-add per key and element in registers.
//!
//! Query rows past the task's last are zero (their scores are zero and never exponentiated,
//! so they add nothing), so the tiles need no row remainder. Output rows are written straight
//! into `[n, heads, head_dim]`.

use std::arch::x86_64::*;

use rayon::prelude::*;

use super::{OutRows, Task, LDS, STRIP, TILED_LANES as LANES, TILE_K, TILE_Q};

/// Query rows per `Q Kᵀ` micro-tile (16 accumulator vectors).
const QK_ROWS: usize = 8;
/// Query rows per `P V` micro-tile (with [`PV_VECS`]: 20 accumulator vectors).
const PV_ROWS: usize = 4;
/// Vectors of output columns per `P V` micro-tile.
const PV_VECS: usize = 5;

/// Whether this CPU runs this path (AVX-512F, detected at run time).
pub(super) fn available() -> bool {
    is_x86_feature_detected!("avx512f")
}

/// Keys and values packed for the micro-kernels (see the module docs).
struct Packed {
    /// `[heads][strips][head_dim][STRIP]`.
    kt: Vec<f32>,
    strips: usize,
    /// `[heads][n][hdp]`.
    v: Vec<f32>,
    hdp: usize,
}

fn pack(k: &[f32], v: &[f32], n: usize, heads: usize, hd: usize) -> Packed {
    let strips = n.div_ceil(STRIP);
    let hdp = hd.next_multiple_of(LANES);
    let mut kt = vec![0f32; heads * strips * hd * STRIP];
    kt.par_chunks_mut(strips * hd * STRIP)
        .enumerate()
        .for_each(|(h, kh)| {
            for (s, strip) in kh.chunks_exact_mut(hd * STRIP).enumerate() {
                for c in 0..STRIP.min(n - s * STRIP) {
                    let row = &k[((s * STRIP + c) * heads + h) * hd..][..hd];
                    for (d, &x) in row.iter().enumerate() {
                        strip[d * STRIP + c] = x;
                    }
                }
            }
        });
    let mut vp = vec![0f32; heads * n * hdp];
    vp.par_chunks_mut(n * hdp).enumerate().for_each(|(h, vh)| {
        for (j, row) in vh.chunks_exact_mut(hdp).enumerate() {
            row[..hd].copy_from_slice(&v[(j * heads + h) * hd..][..hd]);
        }
    });
    Packed {
        kt,
        strips,
        v: vp,
        hdp,
    }
}

/// Per-worker scratch: scaled queries, score tile, accumulator, running max and denominator.
struct Scratch {
    q: Vec<f32>,
    s: Vec<f32>,
    acc: Vec<f32>,
    m: Vec<f32>,
    l: Vec<f32>,
}

/// Attention of `q`, `k`, `v` (`[n, heads, hd]` f32) over `tasks` into `out` (`[n, heads,
/// hd]`, every row written by exactly one task).
///
/// # Safety
/// The CPU supports AVX-512F ([`available`]); `tasks` cover each output row once; `out`
/// holds `n · heads · hd` floats.
pub(super) unsafe fn run(
    tasks: Vec<Task>,
    (heads, hd, scale): (usize, usize, f32),
    q: &[f32],
    k: &[f32],
    v: &[f32],
    out: OutRows,
) {
    let n = q.len() / (heads * hd).max(1);
    if n == 0 || hd == 0 {
        return;
    }
    let p = pack(k, v, n, heads, hd);
    tasks.into_par_iter().for_each_init(
        || Scratch {
            q: vec![0f32; TILE_Q * hd],
            s: vec![0f32; TILE_Q * LDS],
            acc: vec![0f32; TILE_Q * p.hdp],
            m: vec![0f32; TILE_Q],
            l: vec![0f32; TILE_Q],
        },
        // SAFETY: the caller's guarantees, passed on.
        |sc, t| unsafe { task(t, (heads, hd, scale), q, &p, sc, out) },
    );
}

/// Runs one task.
///
/// # Safety
/// As [`run`]; the task's rows are written by no other task.
#[target_feature(enable = "avx512f")]
unsafe fn task(
    t: Task,
    (heads, hd, scale): (usize, usize, f32),
    q: &[f32],
    p: &Packed,
    sc: &mut Scratch,
    out: OutRows,
) {
    let (rows, hdp) = (t.q1 - t.q0, p.hdp);
    let rows_pad = rows.next_multiple_of(QK_ROWS);
    for (r, dst) in sc.q.chunks_exact_mut(hd).take(rows_pad).enumerate() {
        if r < rows {
            let src = &q[((t.q0 + r) * heads + t.head) * hd..][..hd];
            for (d, &x) in dst.iter_mut().zip(src) {
                *d = x * scale;
            }
        } else {
            dst.fill(0.0);
        }
    }
    let (m, l) = (&mut sc.m[..rows], &mut sc.l[..rows]);
    m.fill(f32::NEG_INFINITY);
    l.fill(0.0);
    sc.acc[..rows_pad * hdp].fill(0.0);
    let n = p.v.len() / (hdp * heads);
    let kt = &p.kt[t.head * p.strips * hd * STRIP..][..p.strips * hd * STRIP];
    let v = &p.v[t.head * n * hdp..][..n * hdp];
    for k0 in (t.seg_start..t.seg_end).step_by(TILE_K) {
        let cols = (t.seg_end - k0).min(TILE_K);
        let (first, lead) = (k0 / STRIP, k0 % STRIP);
        let strips = (lead + cols).div_ceil(STRIP);
        for st in 0..strips {
            let b = kt[(first + st) * hd * STRIP..][..hd * STRIP].as_ptr();
            for r0 in (0..rows_pad).step_by(QK_ROWS) {
                // SAFETY: `sc.q` holds rows_pad × hd queries; `b` a whole strip; the tile's
                // rows r0..r0 + 8 and columns st·32..st·32 + 32 lie inside `sc.s`
                // (TILE_Q × LDS, strips · 32 <= LDS).
                qk_tile(
                    sc.q.as_ptr().add(r0 * hd),
                    hd,
                    b,
                    sc.s.as_mut_ptr().add(r0 * LDS + st * STRIP),
                );
            }
        }
        super::online_softmax_body::<LANES>(&mut sc.s[lead..], LDS, cols, m, l, &mut sc.acc, hdp);
        let vb = &v[k0 * hdp..][..cols * hdp];
        let mut c0 = 0;
        while c0 < hdp {
            let vecs = ((hdp - c0) / LANES).min(PV_VECS);
            for r0 in (0..rows.next_multiple_of(PV_ROWS)).step_by(PV_ROWS) {
                let (s, a) = (
                    sc.s[r0 * LDS + lead..].as_ptr(),
                    sc.acc[r0 * hdp + c0..].as_mut_ptr(),
                );
                let vp = vb[c0..].as_ptr();
                // SAFETY: rows r0..r0 + 4 <= rows_pad of `sc.s` (columns lead..lead + cols)
                // and of `sc.acc` (columns c0..c0 + 16 · vecs <= hdp); `vb` holds cols rows
                // of hdp values.
                match vecs {
                    1 => pv_tile::<1>(s, cols, vp, hdp, a),
                    2 => pv_tile::<2>(s, cols, vp, hdp, a),
                    3 => pv_tile::<3>(s, cols, vp, hdp, a),
                    4 => pv_tile::<4>(s, cols, vp, hdp, a),
                    _ => pv_tile::<PV_VECS>(s, cols, vp, hdp, a),
                }
            }
            c0 += vecs * LANES;
        }
    }
    for (r, &lr) in l.iter().enumerate() {
        let inv = 1.0 / lr;
        // SAFETY: row (q0 + r, head) belongs to this task alone (the caller's guarantee).
        let dst = out.slice(((t.q0 + r) * heads + t.head) * hd, hd);
        for (o, &a) in dst.iter_mut().zip(&sc.acc[r * hdp..][..hd]) {
            *o = a * inv;
        }
    }
}

/// Scores of [`QK_ROWS`] queries (`q`, rows `hd` apart) × one strip `b` (`[hd][STRIP]`) into
/// `s` (rows [`LDS`] apart): per element `head_dim` fused multiply-adds in increasing `d`.
///
/// # Safety
/// AVX-512F; `q` readable for `QK_ROWS · hd`, `b` for `hd · STRIP` floats; `s` writable at
/// `r · LDS + c` for `r < QK_ROWS`, `c < STRIP`.
#[inline]
#[target_feature(enable = "avx512f")]
unsafe fn qk_tile(q: *const f32, hd: usize, b: *const f32, s: *mut f32) {
    let mut lo = [_mm512_setzero_ps(); QK_ROWS];
    let mut hi = [_mm512_setzero_ps(); QK_ROWS];
    for d in 0..hd {
        let b0 = _mm512_loadu_ps(b.add(d * STRIP));
        let b1 = _mm512_loadu_ps(b.add(d * STRIP + LANES));
        for r in 0..QK_ROWS {
            let a = _mm512_set1_ps(*q.add(r * hd + d));
            lo[r] = _mm512_fmadd_ps(a, b0, lo[r]);
            hi[r] = _mm512_fmadd_ps(a, b1, hi[r]);
        }
    }
    for r in 0..QK_ROWS {
        _mm512_storeu_ps(s.add(r * LDS), lo[r]);
        _mm512_storeu_ps(s.add(r * LDS + LANES), hi[r]);
    }
}

/// `acc` ([`PV_ROWS`] rows `ldv` apart, `V` vectors wide) `+= P V` over `cols` keys: `p`
/// rows [`LDS`] apart, `v` rows `ldv` apart; per element one fused multiply-add per key in
/// increasing key order.
///
/// # Safety
/// AVX-512F; `p` readable at `r · LDS + j` for `r < PV_ROWS`, `j < cols`; `v` at `j · ldv +
/// c` and `acc` (also writable) at `r · ldv + c` for `c < 16 · V`.
#[inline]
#[target_feature(enable = "avx512f")]
unsafe fn pv_tile<const V: usize>(
    p: *const f32,
    cols: usize,
    v: *const f32,
    ldv: usize,
    acc: *mut f32,
) {
    let mut a = [[_mm512_setzero_ps(); V]; PV_ROWS];
    for (r, row) in a.iter_mut().enumerate() {
        for (x, lane) in row.iter_mut().enumerate() {
            *lane = _mm512_loadu_ps(acc.add(r * ldv + x * LANES));
        }
    }
    for j in 0..cols {
        let mut b = [_mm512_setzero_ps(); V];
        for (x, bv) in b.iter_mut().enumerate() {
            *bv = _mm512_loadu_ps(v.add(j * ldv + x * LANES));
        }
        for (r, row) in a.iter_mut().enumerate() {
            let w = _mm512_set1_ps(*p.add(r * LDS + j));
            for (lane, &bv) in row.iter_mut().zip(&b) {
                *lane = _mm512_fmadd_ps(w, bv, *lane);
            }
        }
    }
    for (r, row) in a.iter().enumerate() {
        for (x, &lane) in row.iter().enumerate() {
            _mm512_storeu_ps(acc.add(r * ldv + x * LANES), lane);
        }
    }
}
