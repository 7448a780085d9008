//! Reading a checkpoint's safetensors shards into tensors of the run's dtype in bounded
//! memory: one shard mapped at a time, each tensor converted straight from
//! the mapped bytes, its pages released as soon as it is converted.
//!
//! Mapping every shard and converting lazily (candle's `VarBuilder::from_mmaped_safetensors`)
//! keeps every touched page of every shard resident next to the converted weights: a bf16
//! checkpoint loaded as f32 peaks at 1.5× the f32 weights plus the largest tensor's
//! intermediate bf16 copy. Here the peak is the converted weights plus one 64 MiB chunk of
//! mapped pages (bf16/f16 → f32; one tensor for other conversions).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use candle_core::{DType, Device, Shape, Tensor};
use candle_nn::var_builder::SimpleBackend;
use memmap2::{Mmap, UncheckedAdvice};
use safetensors::{Dtype, SafeTensors};

use crate::config::ConfigError;

/// The loaded tensors handed out once each: a layer that takes a tensor removes it from the
/// map, so the loaded copy is freed as soon as the layer holds what it keeps (a CPU projection
/// its packed panels, see `layers::Proj`) instead of living until the model is built. Peak
/// memory while building is then the kept weights plus one tensor, not the two side by side.
/// A name taken twice is an error ("cannot find tensor"), like a missing one.
pub struct TakeOnce(Mutex<HashMap<String, Tensor>>);

impl TakeOnce {
    /// Hands out `tensors` once each.
    pub fn new(tensors: HashMap<String, Tensor>) -> Self {
        Self(Mutex::new(tensors))
    }

    fn take(&self, name: &str) -> candle_core::Result<Tensor> {
        let mut map = self.0.lock().unwrap_or_else(|e| e.into_inner());
        map.remove(name).ok_or_else(|| {
            candle_core::Error::CannotFindTensor {
                path: name.to_string(),
            }
            .bt()
        })
    }
}

impl SimpleBackend for TakeOnce {
    fn get(
        &self,
        shape: Shape,
        name: &str,
        _: candle_nn::Init,
        dtype: DType,
        device: &Device,
    ) -> candle_core::Result<Tensor> {
        let tensor = self.take(name)?;
        if tensor.shape() != &shape {
            return Err(candle_core::Error::UnexpectedShape {
                msg: format!("shape mismatch for {name}"),
                expected: shape,
                got: tensor.shape().clone(),
            }
            .bt());
        }
        tensor.to_device(device)?.to_dtype(dtype)
    }

    fn get_unchecked(
        &self,
        name: &str,
        dtype: DType,
        device: &Device,
    ) -> candle_core::Result<Tensor> {
        self.take(name)?.to_device(device)?.to_dtype(dtype)
    }

    fn contains_tensor(&self, name: &str) -> bool {
        let map = self.0.lock().unwrap_or_else(|e| e.into_inner());
        map.contains_key(name)
    }
}

/// Errors loading a checkpoint.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// A file could not be read.
    #[error("{path}: {source}")]
    Io {
        /// File path.
        path: PathBuf,
        /// Cause.
        source: std::io::Error,
    },
    /// `config.json` is invalid or unsupported.
    #[error("{path}: {source}")]
    Config {
        /// File path.
        path: PathBuf,
        /// Cause.
        source: ConfigError,
    },
    /// The directory has neither `model.safetensors` nor `model.safetensors.index.json`, or the
    /// index is malformed.
    #[error("{0}")]
    Weights(String),
    /// A tensor is missing, mis-shaped, or the dtype is unsupported (the message names it).
    #[error("loading weights: {0}")]
    Candle(#[from] candle_core::Error),
}

/// Every tensor of the safetensors `files`, converted to `dtype` on `device`, by name.
/// Files are read one after another and each is unmapped before the next is mapped; within
/// a file, mapped pages are dropped from the process (`MADV_DONTNEED`) as soon as they are
/// converted ([`CHUNK_BYTES`] at a time for bf16/f16 → f32, widened element by element from
/// the mapped bytes with no copy in the stored dtype; other conversions go through candle's
/// `to_dtype`, released per tensor).
///
/// Errors: [`LoadError::Io`] for a file that cannot be opened or mapped,
/// [`LoadError::Weights`] for a malformed header or an unsupported stored dtype (naming the
/// file and the tensor), [`LoadError::Candle`] from the conversion.
pub fn load_tensors(
    files: &[PathBuf],
    dtype: DType,
    device: &Device,
) -> Result<HashMap<String, Tensor>, LoadError> {
    let mut out = HashMap::new();
    for path in files {
        load_file(path, dtype, device, &mut out)?;
    }
    Ok(out)
}

fn load_file(
    path: &Path,
    dtype: DType,
    device: &Device,
    out: &mut HashMap<String, Tensor>,
) -> Result<(), LoadError> {
    let io = |source| LoadError::Io {
        path: path.to_path_buf(),
        source,
    };
    let file = std::fs::File::open(path).map_err(io)?;
    // SAFETY: mapped read-only; like every mmap user (candle included) we rely on the file not
    // being modified while it is mapped, here only for the duration of this function.
    let map = unsafe { Mmap::map(&file) }.map_err(io)?;
    let bad = |msg: String| LoadError::Weights(format!("{}: {msg}", path.display()));
    let st = SafeTensors::deserialize(&map).map_err(|e| bad(e.to_string()))?;
    let base = map.as_ptr() as usize;
    // SAFETY: a range is released only after its bytes were converted into an owned buffer
    // and are not read again; dropping pages of a read-only file mapping only makes a later
    // read fault them back in from the file.
    let release = |bytes: &[u8]| {
        let offset = bytes.as_ptr() as usize - base;
        let dropped =
            unsafe { map.unchecked_advise_range(UncheckedAdvice::DontNeed, offset, bytes.len()) };
        if let Err(e) = dropped {
            tracing::debug!("{}: madvise(DONTNEED) at {offset}: {e}", path.display());
        }
    };
    for (name, view) in st.iter() {
        let t = convert(
            view.data(),
            view.dtype(),
            view.shape(),
            dtype,
            device,
            &release,
        )
        .map_err(|e| bad(format!("{name}: {e}")))?;
        out.insert(name.to_string(), t);
    }
    Ok(())
}

/// Bytes of stored data widened per step before their pages are released (64 MiB: a
/// multiple of any page size, so every release but a tensor's last covers whole pages).
const CHUNK_BYTES: usize = 64 << 20;

/// One tensor from its stored little-endian bytes `data`, calling `release` on each range of
/// `data` once it is no longer needed: bf16 and f16 widened to f32 [`CHUNK_BYTES`] at a time
/// (so at most one chunk of the source is resident next to the output), other pairs through
/// candle's `to_dtype`, released at the end.
fn convert(
    data: &[u8],
    stored: Dtype,
    shape: &[usize],
    dtype: DType,
    device: &Device,
    release: &dyn Fn(&[u8]),
) -> Result<Tensor, String> {
    let widen = |f: fn([u8; 2]) -> f32| -> Vec<f32> {
        let mut v = Vec::with_capacity(data.len() / 2);
        for chunk in data.chunks(CHUNK_BYTES) {
            v.extend(chunk.chunks_exact(2).map(|b| f([b[0], b[1]])));
            release(chunk);
        }
        v
    };
    let t = match (stored, dtype) {
        (Dtype::BF16, DType::F32) => Tensor::from_vec(
            widen(|b| half::bf16::from_le_bytes(b).to_f32()),
            shape,
            device,
        ),
        (Dtype::F16, DType::F32) => Tensor::from_vec(
            widen(|b| half::f16::from_le_bytes(b).to_f32()),
            shape,
            device,
        ),
        _ => {
            let from = match stored {
                Dtype::BF16 => DType::BF16,
                Dtype::F16 => DType::F16,
                Dtype::F32 => DType::F32,
                Dtype::F64 => DType::F64,
                Dtype::I64 => DType::I64,
                Dtype::U32 => DType::U32,
                Dtype::U8 => DType::U8,
                other => return Err(format!("unsupported stored dtype {other:?}")),
            };
            let t =
                Tensor::from_raw_buffer(data, from, shape, device).and_then(|t| t.to_dtype(dtype));
            release(data);
            t
        }
    };
    t.map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bf16_and_f16_widen_exactly() {
        let vals = [1.0f32, -2.5, 3.140625, 0.0, -0.0, 65504.0];
        let bf: Vec<u8> = vals
            .iter()
            .flat_map(|v| half::bf16::from_f32(*v).to_le_bytes())
            .collect();
        let f16: Vec<u8> = vals
            .iter()
            .flat_map(|v| half::f16::from_f32(*v).to_le_bytes())
            .collect();
        let dev = Device::Cpu;
        let released = std::cell::Cell::new(0);
        let count = |b: &[u8]| released.set(released.get() + b.len());
        let a = convert(&bf, Dtype::BF16, &[2, 3], DType::F32, &dev, &count).unwrap();
        let b = convert(&f16, Dtype::F16, &[2, 3], DType::F32, &dev, &count).unwrap();
        // Every stored byte is released once converted.
        assert_eq!(released.get(), bf.len() + f16.len());
        let want_bf: Vec<f32> = vals
            .iter()
            .map(|v| half::bf16::from_f32(*v).to_f32())
            .collect();
        assert_eq!(a.dims(), &[2, 3]);
        assert_eq!(a.flatten_all().unwrap().to_vec1::<f32>().unwrap(), want_bf);
        assert_eq!(b.flatten_all().unwrap().to_vec1::<f32>().unwrap(), vals);
        // Other pairs go through candle: bf16 kept as bf16 keeps its bits.
        let c = convert(&bf, Dtype::BF16, &[6], DType::BF16, &dev, &count).unwrap();
        let bits: Vec<u16> = c
            .to_vec1::<half::bf16>()
            .unwrap()
            .iter()
            .map(|v| v.to_bits())
            .collect();
        let want: Vec<u16> = bf
            .chunks_exact(2)
            .map(|b| u16::from_le_bytes([b[0], b[1]]))
            .collect();
        assert_eq!(bits, want);
        assert!(convert(&[0; 4], Dtype::BOOL, &[4], DType::F32, &dev, &count).is_err());
    }
}
