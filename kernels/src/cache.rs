//! `reshape_and_cache`: scatter the new keys/values of a step into the paged cache, in place.

use candle_core::backend::BackendStorage;
use candle_core::{CpuStorage, InplaceOp2, Layout, Tensor};

use crate::{require_cpu, KernelError};

const NAME: &str = "reshape_and_cache";

/// Writes `key`/`value` `[total_tokens, n_kv_heads, head_dim]` into `key_cache`/`value_cache`
/// `[num_blocks, block_size, n_kv_heads, head_dim]` at `slot_mapping[i]` (slot =
/// `block * block_size + offset`), in place: every clone of the cache tensors sees the write.
///
/// The new key/value are cast to the cache dtype first (f32, f16 or bf16).
///
/// Errors: [`KernelError::Invalid`] when shapes disagree, the cache is not contiguous, or a
/// slot is outside the pool; [`KernelError::UnsupportedDevice`] off the CPU.
pub fn reshape_and_cache(
    key: &Tensor,
    value: &Tensor,
    key_cache: &Tensor,
    value_cache: &Tensor,
    slot_mapping: &[u32],
) -> Result<(), KernelError> {
    for t in [key, value, key_cache, value_cache] {
        require_cpu(NAME, t)?;
    }
    let (_, _, kvh, hd) = check_cache_write(key, value, key_cache, value_cache, slot_mapping)?;
    let op = WriteSlots {
        slots: slot_mapping,
        row: kvh * hd,
    };
    let key = key.to_dtype(key_cache.dtype())?.contiguous()?;
    let value = value.to_dtype(value_cache.dtype())?.contiguous()?;
    key_cache.inplace_op2(&key, &op)?;
    value_cache.inplace_op2(&value, &op)?;
    Ok(())
}

/// The checks of a cache write, shared by [`reshape_and_cache`] and the portable write: `key`
/// and `value` `[slot_mapping.len(), n_kv_heads, head_dim]`, pools of one shape `[num_blocks,
/// block_size, n_kv_heads, head_dim]`, contiguous, every slot inside them. Returns the pools'
/// dimensions.
///
/// Errors: [`KernelError::Invalid`] naming `reshape_and_cache` and the first problem.
pub(crate) fn check_cache_write(
    key: &Tensor,
    value: &Tensor,
    key_cache: &Tensor,
    value_cache: &Tensor,
    slot_mapping: &[u32],
) -> Result<(usize, usize, usize, usize), KernelError> {
    let invalid = |msg: String| KernelError::Invalid { kernel: NAME, msg };
    let (num_blocks, block_size, kvh, hd) = key_cache.dims4()?;
    if value_cache.dims() != key_cache.dims() {
        return Err(invalid(format!(
            "value cache {:?} differs from key cache {:?}",
            value_cache.dims(),
            key_cache.dims()
        )));
    }
    for (name, t) in [("key", key), ("value", value)] {
        let (n, h, d) = t.dims3()?;
        if n != slot_mapping.len() || h != kvh || d != hd {
            return Err(invalid(format!(
                "{name} {:?} does not match slots {} x cache heads {kvh} x head_dim {hd}",
                t.dims(),
                slot_mapping.len()
            )));
        }
    }
    if !key_cache.is_contiguous() || !value_cache.is_contiguous() {
        return Err(invalid("cache tensors must be contiguous".into()));
    }
    let num_slots = num_blocks * block_size;
    if let Some(bad) = slot_mapping.iter().find(|&&s| s as usize >= num_slots) {
        return Err(invalid(format!(
            "slot {bad} outside the pool of {num_slots} slots"
        )));
    }
    Ok((num_blocks, block_size, kvh, hd))
}

/// In-place op: row `i` of the source goes to row `slots[i]` of the destination pool.
struct WriteSlots<'a> {
    slots: &'a [u32],
    /// Elements per slot (`n_kv_heads * head_dim`).
    row: usize,
}

impl WriteSlots<'_> {
    fn scatter<T: Copy>(&self, dst: &mut [T], dl: &Layout, src: &[T], sl: &Layout) {
        let dst = &mut dst[dl.start_offset()..];
        let src = &src[sl.start_offset()..];
        for (i, &slot) in self.slots.iter().enumerate() {
            let d = slot as usize * self.row;
            dst[d..d + self.row].copy_from_slice(&src[i * self.row..(i + 1) * self.row]);
        }
    }
}

impl InplaceOp2 for WriteSlots<'_> {
    fn name(&self) -> &'static str {
        NAME
    }

    fn cpu_fwd(
        &self,
        s1: &mut CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> candle_core::Result<()> {
        match (s1, s2) {
            (CpuStorage::F32(d), CpuStorage::F32(s)) => self.scatter(d, l1, s, l2),
            (CpuStorage::F16(d), CpuStorage::F16(s)) => self.scatter(d, l1, s, l2),
            (CpuStorage::BF16(d), CpuStorage::BF16(s)) => self.scatter(d, l1, s, l2),
            (d, s) => candle_core::bail!(
                "{NAME}: unsupported dtypes cache {:?} / new {:?}",
                d.dtype(),
                s.dtype()
            ),
        }
        Ok(())
    }
}
