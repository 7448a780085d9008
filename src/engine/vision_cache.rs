//! Vision embeddings keyed by image SHA-256: an image's embeddings are computed once, in a
//! batch with other images, and kept while any unfinished sequence refers to the image (so
//! several questions about one image, duplicate rows and preempted sequences reuse them).

use std::collections::HashMap;

use candle_core::Tensor;
use verisample_models::{ImageEmbeds, ImageGrid};

use super::request::PreparedImage;

#[derive(Debug)]
struct Entry {
    /// Preprocessed pixels `[n_patches, patch_dim]` and grid, until the embeddings exist.
    pixels: Option<(Tensor, ImageGrid)>,
    /// Embeddings `[num_tokens, hidden]` on the model's device.
    embeds: Option<ImageEmbeds>,
    /// Unfinished sequences referring to this image.
    users: usize,
}

/// Per-image pixels and embeddings with user counts.
#[derive(Debug, Default)]
pub struct VisionCache {
    entries: HashMap<[u8; 32], Entry>,
}

impl VisionCache {
    /// Take a reference on `image` for one sequence, keeping its pixels unless the
    /// embeddings (or pixels) are already there.
    pub fn add_user(&mut self, image: &PreparedImage) {
        let e = self.entries.entry(image.sha256).or_insert(Entry {
            pixels: None,
            embeds: None,
            users: 0,
        });
        e.users += 1;
        if e.embeds.is_none() && e.pixels.is_none() {
            e.pixels = Some((image.pixel_values.clone(), image.grid));
        }
    }

    /// Drop one reference; the entry is freed with its last user.
    pub fn remove_user(&mut self, sha256: &[u8; 32]) {
        if let Some(e) = self.entries.get_mut(sha256) {
            e.users = e.users.saturating_sub(1);
            if e.users == 0 {
                self.entries.remove(sha256);
            }
        }
    }

    /// The embeddings of an image, if computed.
    pub fn embeds(&self, sha256: &[u8; 32]) -> Option<&ImageEmbeds> {
        self.entries.get(sha256).and_then(|e| e.embeds.as_ref())
    }

    /// Pixels and grid of an image whose embeddings are still missing.
    pub fn pending_pixels(&self, sha256: &[u8; 32]) -> Option<&(Tensor, ImageGrid)> {
        self.entries
            .get(sha256)
            .filter(|e| e.embeds.is_none())
            .and_then(|e| e.pixels.as_ref())
    }

    /// Store computed embeddings and drop the pixels.
    pub fn set_embeds(&mut self, sha256: &[u8; 32], embeds: ImageEmbeds) {
        if let Some(e) = self.entries.get_mut(sha256) {
            e.embeds = Some(embeds);
            e.pixels = None;
        }
    }

    /// Images with at least one user.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no image is held.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    fn img(byte: u8) -> PreparedImage {
        PreparedImage {
            sha256: [byte; 32],
            pixel_values: Tensor::zeros((4, 3), candle_core::DType::F32, &Device::Cpu).unwrap(),
            grid: ImageGrid { thw: [1, 2, 2] },
            start: 0,
            num_tokens: 1,
        }
    }

    #[test]
    fn entries_live_while_users_remain() {
        let mut c = VisionCache::default();
        c.add_user(&img(1));
        c.add_user(&img(1));
        c.add_user(&img(2));
        assert_eq!(c.len(), 2);
        assert!(c.pending_pixels(&[1; 32]).is_some());
        let e = Tensor::ones((1, 8), candle_core::DType::F32, &Device::Cpu).unwrap();
        c.set_embeds(
            &[1; 32],
            ImageEmbeds {
                embeds: e,
                deepstack: vec![],
            },
        );
        assert!(c.pending_pixels(&[1; 32]).is_none());
        assert_eq!(c.embeds(&[1; 32]).unwrap().embeds.dims(), &[1, 8]);
        c.remove_user(&[1; 32]);
        assert!(c.embeds(&[1; 32]).is_some(), "one user left");
        c.remove_user(&[1; 32]);
        assert!(c.embeds(&[1; 32]).is_none());
        assert_eq!(c.len(), 1);
        c.remove_user(&[2; 32]);
        assert!(c.is_empty());
    }
}
