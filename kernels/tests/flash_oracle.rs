//! The flash path on the CPU: the argument-building code ([`FlashStep`], through
//! [`PagedStep`] and [`AttentionPath::segment_attention`]) against the native kernels, the
//! oracle's own two computations against each other, and the crate's argument contract
//! (what `candle-flash-attn` 0.11.1 refuses, the oracle refuses).

use candle_core::{DType, Device, Tensor};
use verisample_kernels::flash::{self, oracle, FlashStep};
use verisample_kernels::max_abs_diff;
use verisample_kernels::{
    paged_attention, paged_attention_reference, reshape_and_cache, AttentionPath, KernelError,
    PagedAttentionParams, PagedStep, SegmentAttentionParams,
};

const BS: usize = 32;
const KVH: usize = 2;
const NH: usize = 6;
const HD: usize = 16;

fn lcg(seed: u64, n: usize) -> Vec<f32> {
    verisample_kernels::lcg_uniform(seed, n, 2.0)
}

fn flat(t: &Tensor) -> Vec<f32> {
    t.to_dtype(DType::F32)
        .unwrap()
        .flatten_all()
        .unwrap()
        .to_vec1()
        .unwrap()
}

/// A ragged step over a scattered pool, its inputs, and the pools holding it.
struct Case {
    ql: Vec<usize>,
    cl: Vec<usize>,
    tables: Vec<Vec<u32>>,
    slots: Vec<u32>,
    num_blocks: usize,
    q: Tensor,
    kc: Tensor,
    vc: Tensor,
}

impl Case {
    /// `shape`: (new tokens, context) per sequence. The new keys/values are written with the
    /// native kernel, so every path attends over the same pools.
    fn new(shape: &[(usize, usize)], dtype: DType) -> Self {
        let dev = Device::Cpu;
        let num_blocks: usize = shape.iter().map(|s| s.1.div_ceil(BS)).sum::<usize>() + 2;
        let mut ids: Vec<u32> = (0..num_blocks as u32)
            .map(|i| (i * 5 + 1) % num_blocks as u32)
            .collect();
        let (mut tables, mut slots) = (Vec::new(), Vec::new());
        for &(q, c) in shape {
            let table: Vec<u32> = ids.drain(..c.div_ceil(BS)).collect();
            slots.extend((c - q..c).map(|p| table[p / BS] * BS as u32 + (p % BS) as u32));
            tables.push(table);
        }
        let total: usize = shape.iter().map(|s| s.0).sum();
        let t = |seed, dims: &[usize]| {
            Tensor::from_vec(lcg(seed, dims.iter().product()), dims, &dev)
                .unwrap()
                .to_dtype(dtype)
                .unwrap()
        };
        let pool = [num_blocks, BS, KVH, HD];
        let (kc, vc) = (t(1, &pool), t(2, &pool));
        reshape_and_cache(
            &t(3, &[total, KVH, HD]),
            &t(4, &[total, KVH, HD]),
            &kc,
            &vc,
            &slots,
        )
        .unwrap();
        Self {
            ql: shape.iter().map(|s| s.0).collect(),
            cl: shape.iter().map(|s| s.1).collect(),
            tables,
            slots,
            num_blocks,
            q: t(5, &[total, NH, HD]),
            kc,
            vc,
        }
    }

    fn params(&self) -> PagedAttentionParams<'_> {
        PagedAttentionParams {
            query_lens: &self.ql,
            context_lens: &self.cl,
            block_tables: &self.tables,
            scale: 1.0 / (HD as f32).sqrt(),
        }
    }

    fn u32s(v: &[usize]) -> Tensor {
        let v: Vec<u32> = v.iter().map(|&x| x as u32).collect();
        Tensor::new(v.as_slice(), &Device::Cpu).unwrap()
    }

    fn cumulative(lens: &[usize]) -> Tensor {
        let mut cu = vec![0];
        for &l in lens {
            cu.push(cu[cu.len() - 1] + l);
        }
        Self::u32s(&cu)
    }

    /// The block table as the crate takes it: `[batch, max_blocks]` i32.
    fn block_table(&self) -> Tensor {
        let width = self.tables.iter().map(Vec::len).max().unwrap();
        let mut flat = vec![0i32; self.tables.len() * width];
        for (s, t) in self.tables.iter().enumerate() {
            for (j, &b) in t.iter().enumerate() {
                flat[s * width + j] = b as i32;
            }
        }
        Tensor::from_vec(flat, (self.tables.len(), width), &Device::Cpu).unwrap()
    }

    /// The oracle called directly with this case's arguments and the given window.
    fn oracle(
        &self,
        left: Option<usize>,
        right: Option<usize>,
        softcap: Option<f32>,
    ) -> Result<Tensor, KernelError> {
        oracle::flash_attn_varlen_paged_windowed(
            &self.q,
            &self.kc,
            &self.vc,
            &Self::cumulative(&self.ql),
            &Self::cumulative(&self.cl),
            &self.block_table(),
            None,
            *self.ql.iter().max().unwrap(),
            *self.cl.iter().max().unwrap(),
            1.0 / (HD as f32).sqrt(),
            left,
            right,
            BS,
            softcap,
        )
    }
}

/// A fresh prefill spanning blocks, a chunk after cached tokens, decodes at and past a block
/// boundary, a one-token context.
const MIXED: [(usize, usize); 5] = [(70, 70), (20, 97), (1, 64), (1, 65), (1, 1)];

/// Through [`PagedStep`] on the flash path (arguments built by [`FlashStep`]) the output is
/// bitwise the native kernel's: the oracle runs that kernel exactly when the cumulative
/// lengths, block table and window it is given say what the engine's metadata says.
#[test]
fn flash_step_equals_the_native_kernel_bitwise() {
    for dtype in [DType::F32, DType::BF16, DType::F16] {
        let c = Case::new(&MIXED, dtype);
        let native = paged_attention(&c.q, &c.kc, &c.vc, &c.params()).unwrap();
        let step = PagedStep::new(
            AttentionPath::Flash,
            c.params(),
            &c.slots,
            BS,
            c.num_blocks,
            &Device::Cpu,
        )
        .unwrap();
        let out = step.attend(&c.q, &c.kc, &c.vc).unwrap();
        assert_eq!(out.dtype(), dtype);
        assert_eq!(flat(&out), flat(&native), "{dtype:?}");
    }
}

/// The oracle's direct computation (taken for any window but the causal one) and its kernel
/// computation (the causal one) agree where both apply: a left window as long as the longest
/// context is the causal mask. And the independent reference agrees with the kernel.
#[test]
fn direct_and_kernel_computations_agree() {
    let c = Case::new(&MIXED, DType::F32);
    let kernel = c.oracle(None, Some(0), None).unwrap();
    let direct = c.oracle(Some(97), Some(0), None).unwrap();
    let d = max_abs_diff(&flat(&direct), &flat(&kernel));
    assert!(d <= 1e-5, "direct vs kernel max |Δ| {d}");
    let reference = paged_attention_reference(&c.q, &c.kc, &c.vc, &c.params()).unwrap();
    let d = max_abs_diff(&flat(&reference), &flat(&kernel));
    assert!(d <= 1e-5, "reference vs kernel max |Δ| {d}");
}

/// A local window sees fewer keys: the output changes where the window cuts the context and
/// not for a query whose context fits in it. Softcap changes every row.
#[test]
fn window_and_softcap_semantics() {
    let c = Case::new(&[(4, 40), (1, 3)], DType::F32);
    let causal = flat(&c.oracle(None, Some(0), None).unwrap());
    let local = flat(&c.oracle(Some(8), Some(0), None).unwrap());
    let row = NH * HD;
    // Sequence 0 (40 keys) is cut by the window; sequence 1 (3 keys, row 4) is not.
    let cut = max_abs_diff(&causal[..4 * row], &local[..4 * row]);
    assert!(cut.is_finite() && cut > 1e-3, "{cut}");
    // (The causal call runs the kernel, the windowed one the direct loop: equal within 1e-5.)
    assert!(max_abs_diff(&causal[4 * row..], &local[4 * row..]) <= 1e-5);
    // A window of 0 to the left: each query sees only its own key, so the output is that
    // key's value (GQA: head h reads KV head h / 3).
    let only_self = flat(&c.oracle(Some(0), Some(0), None).unwrap());
    let vc = flat(&c.vc);
    let (block, off) = (c.tables[1][0] as usize, 2);
    for h in 0..NH {
        let v = &vc[((block * BS + off) * KVH + h / (NH / KVH)) * HD..][..HD];
        assert_eq!(&only_self[4 * row + h * HD..][..HD], v, "head {h}");
    }
    let capped = flat(&c.oracle(None, Some(0), Some(0.5)).unwrap());
    let d = max_abs_diff(&capped, &causal);
    assert!(d.is_finite() && d > 1e-3, "{d}");
}

/// What the crate refuses, the oracle refuses, with the crate's words.
#[test]
fn the_crates_argument_contract() {
    let c = Case::new(&[(3, 40)], DType::BF16);
    let cu_q = Case::cumulative(&c.ql);
    let cu_k = Case::cumulative(&c.cl);
    let table = c.block_table();
    let call = |q: &Tensor,
                kc: &Tensor,
                cu_q: &Tensor,
                cu_k: &Tensor,
                table: &Tensor,
                max_q,
                max_k,
                page| {
        oracle::flash_attn_varlen_paged_windowed(
            q,
            kc,
            kc,
            cu_q,
            cu_k,
            table,
            None,
            max_q,
            max_k,
            0.25,
            None,
            Some(0),
            page,
            None,
        )
    };
    let err = |r: Result<Tensor, KernelError>| match r {
        Err(KernelError::Invalid { msg, .. }) => msg,
        other => panic!("expected an invalid-argument error, got {other:?}"),
    };
    assert!(call(&c.q, &c.kc, &cu_q, &cu_k, &table, 3, 40, BS).is_ok());
    assert!(
        err(call(&c.q, &c.kc, &cu_q, &cu_k, &table, 3, 40, 16)).contains("does not match k shape")
    );
    let pool16 = c.kc.reshape((c.num_blocks * 2, 16, KVH, HD)).unwrap();
    assert!(err(call(&c.q, &pool16, &cu_q, &cu_k, &table, 3, 40, 16)).contains("multiple of 32"));
    let q12 = c.q.narrow(2, 0, 12).unwrap().contiguous().unwrap();
    let k12 = c.kc.narrow(3, 0, 12).unwrap().contiguous().unwrap();
    assert!(err(call(&q12, &k12, &cu_q, &cu_k, &table, 3, 40, BS)).contains("multiple of 8"));
    let q5 = c.q.narrow(1, 0, 5).unwrap().contiguous().unwrap();
    assert!(err(call(&q5, &c.kc, &cu_q, &cu_k, &table, 3, 40, BS)).contains("must divide"));
    let i64s = cu_q.to_dtype(DType::I64).unwrap();
    assert!(err(call(&c.q, &c.kc, &i64s, &cu_k, &table, 3, 40, BS)).contains("must be u32"));
    let longer = Case::u32s(&[0, 40, 40]);
    assert!(err(call(&c.q, &c.kc, &cu_q, &longer, &table, 3, 40, BS))
        .contains("same number of elements"));
    assert!(err(call(&c.q, &c.kc, &cu_q, &cu_k, &table, 2, 40, BS)).contains("uncomputed"));
    assert!(err(call(&c.q, &c.kc, &cu_q, &cu_k, &table, 3, 39, BS)).contains("uncomputed"));
    let short = table.narrow(1, 0, 1).unwrap().contiguous().unwrap();
    assert!(err(call(&c.q, &c.kc, &cu_q, &cu_k, &short, 3, 40, BS)).contains("cannot hold 40 keys"));
    let outside = Tensor::new(&[[0i32, c.num_blocks as i32]], &Device::Cpu).unwrap();
    assert!(err(call(&c.q, &c.kc, &cu_q, &cu_k, &outside, 3, 40, BS)).contains("outside the pool"));
    let floats = table.to_dtype(DType::F32).unwrap();
    assert!(err(call(&c.q, &c.kc, &cu_q, &cu_k, &floats, 3, 40, BS)).contains("u32 or i32"));
    let ranges = Tensor::zeros((1, 1, 2), DType::I32, &Device::Cpu).unwrap();
    let r = oracle::flash_attn_varlen_paged_windowed(
        &c.q,
        &c.kc,
        &c.vc,
        &cu_q,
        &cu_k,
        &table,
        Some(&ranges),
        3,
        40,
        0.25,
        None,
        Some(0),
        BS,
        None,
    );
    assert!(err(r).contains("mm_prefix_ranges"));
}

/// The vision path: `flash_attn_varlen` over segments equals the native segment attention
/// bitwise through [`AttentionPath::segment_attention`]; its causal form equals the direct
/// computation of the paged oracle's rule.
#[test]
fn varlen_segments_equal_native_segment_attention() {
    let dev = Device::Cpu;
    let (n, heads, hd) = (57, 4, 80);
    let t = |seed| Tensor::from_vec(lcg(seed, n * heads * hd), (n, heads, hd), &dev).unwrap();
    let (q, k, v) = (t(7), t(8), t(9));
    let segments = [(0, 16), (16, 16), (32, 0), (32, 25)];
    let params = SegmentAttentionParams {
        segments: &segments,
        scale: 0.1,
    };
    let native = AttentionPath::Native
        .segment_attention(&q, &k, &v, &params)
        .unwrap();
    let flash_path = AttentionPath::Flash
        .segment_attention(&q, &k, &v, &params)
        .unwrap();
    assert_eq!(flat(&flash_path), flat(&native));
    // Causal over one segment: row i sees rows 0..=i, so row 0's output is v's row 0.
    let cu = Tensor::new(&[0u32, n as u32], &dev).unwrap();
    let causal = flash::flash_attn_varlen(&q, &k, &v, &cu, &cu, n, n, 0.1, true).unwrap();
    assert_eq!(
        flat(&causal.narrow(0, 0, 1).unwrap()),
        flat(&v.narrow(0, 0, 1).unwrap())
    );
    let full = flash::flash_attn_varlen(&q, &k, &v, &cu, &cu, n, n, 0.1, false).unwrap();
    // The last row sees every row either way (kernel and direct computation: within 1e-5).
    let d = max_abs_diff(
        &flat(&full.narrow(0, n - 1, 1).unwrap()),
        &flat(&causal.narrow(0, n - 1, 1).unwrap()),
    );
    assert!(d <= 1e-5, "last row causal vs full max |Δ| {d}");
}

/// The step's arguments carry the block size rule: a pool of 16-token blocks is refused on the
/// flash path before anything runs.
#[test]
fn flash_step_needs_blocks_of_a_multiple_of_32() {
    let tables = vec![vec![0u32, 1]];
    let params = PagedAttentionParams {
        query_lens: &[20],
        context_lens: &[20],
        block_tables: &tables,
        scale: 1.0,
    };
    let e = FlashStep::new(&params, 16, 4, &Device::Cpu).unwrap_err();
    assert!(e.to_string().contains("multiple of 32"), "{e}");
    assert!(FlashStep::new(&params, 32, 4, &Device::Cpu).is_ok());
}
