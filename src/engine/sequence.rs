//! One sequence in the engine: its tokens (prompt, then generated), position ids, image
//! spans, block table and how much of it is in the KV cache; and the prefix-cache block hash.

use sha2::{Digest, Sha256};

use super::block_manager::{BlockHash, BlockId};

/// Where an image's placeholder tokens sit in a prompt, and which image it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageSpan {
    /// Index of the first image-pad token in the prompt.
    pub start: usize,
    /// Number of image-pad tokens (= rows of the image's vision embeddings).
    pub len: usize,
    /// SHA-256 of the encoded image bytes: keys the vision-embedding cache and goes into the
    /// prefix hash, so that two different images never share KV blocks.
    pub sha256: [u8; 32],
}

impl ImageSpan {
    /// One past the last image-pad token.
    pub fn end(&self) -> usize {
        self.start + self.len
    }
}

/// Prefix hash of every full block of `tokens`, from block `from` (given the hash of block
/// `from - 1` as `parent`, or `None` for block 0).
///
/// Block `i`'s hash is SHA-256 (first 16 bytes) of: the parent block's hash, the block's token
/// ids (little-endian u32), and for each image span overlapping the block its SHA-256 and the
/// block's offset relative to the span start. The hash therefore fixes the whole prefix up to
/// the end of the block, images included (vLLM's automatic prefix caching with multimodal
/// "extra keys"). Position ids are a function of that prefix, so equal hashes mean equal KV.
pub fn block_hashes(
    tokens: &[u32],
    images: &[ImageSpan],
    block_size: usize,
    from: usize,
    parent: Option<BlockHash>,
) -> Vec<BlockHash> {
    let n_full = tokens.len() / block_size;
    let mut out = Vec::with_capacity(n_full.saturating_sub(from));
    let mut parent = parent;
    for b in from..n_full {
        let (lo, hi) = (b * block_size, (b + 1) * block_size);
        let mut h = Sha256::new();
        match parent {
            Some(p) => h.update(p.to_le_bytes()),
            None => h.update([0u8; 16]),
        }
        for t in &tokens[lo..hi] {
            h.update(t.to_le_bytes());
        }
        for img in images.iter().filter(|s| s.start < hi && s.end() > lo) {
            h.update(img.sha256);
            h.update((lo as i64 - img.start as i64).to_le_bytes());
        }
        let digest = h.finalize();
        let mut first = [0u8; 16];
        first.copy_from_slice(&digest[..16]);
        let hash = u128::from_le_bytes(first);
        out.push(hash);
        parent = Some(hash);
    }
    out
}

/// The distinct token ids of a sequence (prompt, image placeholders included, and generated
/// tokens), sorted: the ids the repetition penalty applies to. They follow from the tokens
/// alone, so prefix-cache hits, chunked prefill and preemption do not change them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SeenTokens(Vec<u32>);

impl SeenTokens {
    /// The distinct ids of `tokens`.
    pub fn of(tokens: &[u32]) -> Self {
        let mut ids = tokens.to_vec();
        ids.sort_unstable();
        ids.dedup();
        Self(ids)
    }

    /// Add `token` (no-op when already there).
    pub fn insert(&mut self, token: u32) {
        if let Err(at) = self.0.binary_search(&token) {
            self.0.insert(at, token);
        }
    }

    /// The ids, ascending.
    pub fn ids(&self) -> &[u32] {
        &self.0
    }
}

/// Engine-internal state of one request.
#[derive(Debug, Clone)]
pub struct Sequence {
    /// Arrival order (0, 1, 2, …): the scheduler's key and priority (older first).
    pub arrival: u64,
    /// The caller's request id.
    pub id: u64,
    /// Prompt tokens followed by generated tokens (append with [`Sequence::push_token`]).
    pub tokens: Vec<u32>,
    /// The distinct ids of `tokens`.
    pub seen: SeenTokens,
    /// Number of prompt tokens.
    pub prompt_len: usize,
    /// Position ids of the prompt tokens, `[rows][prompt_len]` ([`super::PreparedInput::positions`]).
    pub prompt_positions: Vec<Vec<u32>>,
    /// Position id of the first generated token; generated token `k` sits at
    /// `next_position + k` in every row (Qwen2-VL `get_rope_index` `mrope_position_deltas`).
    pub next_position: u32,
    /// Image placeholder spans in the prompt.
    pub images: Vec<ImageSpan>,
    /// Generation limit.
    pub max_new_tokens: usize,
    /// The request's own stop token ids (besides the model's end-of-sequence ids).
    pub stop_token_ids: Vec<u32>,
    /// Cache blocks holding this sequence's tokens, in order.
    pub block_table: Vec<BlockId>,
    /// Tokens whose K/V are in the cache (a prefix of `tokens`).
    pub num_computed: usize,
    /// Whether the sequence is (re)filling its prompt: set at admission, cleared when the
    /// step that reaches the end of `tokens` samples.
    pub in_prefill: bool,
    /// Prefix hashes of the full blocks of `tokens` computed so far.
    pub hashes: Vec<BlockHash>,
    /// Times this sequence was preempted.
    pub preemptions: u32,
    /// Prompt tokens served from the prefix cache at the last admission.
    pub cached_tokens: usize,
    /// The prompt ended with an open `<think>` ([`super::PreparedInput::prefilled_think`]).
    pub prefilled_think: bool,
    /// The request's thinking budget and where it stands ([`super::think_budget`]).
    pub think: Option<super::think_budget::ThinkBudget>,
    /// Sampling settings and stream key ([`super::sampling::SampleStream::key`]); `None`:
    /// greedy.
    pub sampling: Option<(super::sampling::SamplingParams, [u8; 32])>,
    /// When the engine took the request from its input ([`super::metrics::RequestLatency`]).
    pub taken: std::time::Instant,
    /// When its first generated token was appended (kept across preemptions).
    pub first_token: Option<std::time::Instant>,
}

impl Sequence {
    /// Append a generated token.
    pub fn push_token(&mut self, token: u32) {
        if self.first_token.is_none() && self.tokens.len() >= self.prompt_len {
            self.first_token = Some(std::time::Instant::now());
        }
        self.tokens.push(token);
        self.seen.insert(token);
    }

    /// Generated tokens so far.
    pub fn generated(&self) -> &[u32] {
        &self.tokens[self.prompt_len..]
    }

    /// Position id of token `i` (prompt or generated) in position row `row`; `row` is below
    /// the rows [`Self::prompt_positions`] holds (the engine admits no prompt with another
    /// count).
    pub fn position(&self, row: usize, i: usize) -> u32 {
        if i < self.prompt_len {
            self.prompt_positions[row][i]
        } else {
            self.next_position + (i - self.prompt_len) as u32
        }
    }

    /// Extend `hashes` to cover the first `n_blocks` full blocks (no-op if already there or if
    /// `tokens` has fewer full blocks).
    pub fn ensure_hashes(&mut self, n_blocks: usize, block_size: usize) {
        if self.hashes.len() >= n_blocks {
            return;
        }
        let upto = (n_blocks * block_size).min(self.tokens.len());
        let more = block_hashes(
            &self.tokens[..upto],
            &self.images,
            block_size,
            self.hashes.len(),
            self.hashes.last().copied(),
        );
        self.hashes.extend(more);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn span(start: usize, len: usize, byte: u8) -> ImageSpan {
        ImageSpan {
            start,
            len,
            sha256: [byte; 32],
        }
    }

    #[test]
    fn hashes_chain_over_the_prefix() {
        let a = block_hashes(&[1, 2, 3, 4, 5, 6, 7], &[], 2, 0, None);
        assert_eq!(
            a.len(),
            3,
            "three full blocks of 2, the 7th token is partial"
        );
        let b = block_hashes(&[1, 2, 3, 4, 5, 6], &[], 2, 0, None);
        assert_eq!(a, b);
        // Same second block content, different first block: different hash.
        let c = block_hashes(&[9, 2, 3, 4], &[], 2, 0, None);
        assert_ne!(a[1], c[1]);
        // Incremental hashing from a parent equals hashing in one go.
        let tail = block_hashes(&[1, 2, 3, 4, 5, 6], &[], 2, 1, Some(a[0]));
        assert_eq!(tail, a[1..].to_vec());
    }

    #[test]
    fn different_images_with_equal_tokens_never_share() {
        let toks = [1, 99, 99, 99, 99, 2];
        let x = block_hashes(&toks, &[span(1, 4, 0xaa)], 2, 0, None);
        let y = block_hashes(&toks, &[span(1, 4, 0xbb)], 2, 0, None);
        for i in 0..3 {
            assert_ne!(x[i], y[i], "block {i}");
        }
        let x2 = block_hashes(&toks, &[span(1, 4, 0xaa)], 2, 0, None);
        assert_eq!(x, x2);
    }

    #[test]
    fn generated_positions_continue_from_next_position() {
        let seq = Sequence {
            arrival: 0,
            id: 0,
            tokens: vec![5, 6, 7, 8],
            seen: SeenTokens::of(&[5, 6, 7, 8]),
            prompt_len: 2,
            prompt_positions: vec![vec![0, 1], vec![0, 3], vec![0, 2]],
            next_position: 4,
            images: vec![],
            max_new_tokens: 8,
            stop_token_ids: vec![],
            block_table: vec![],
            num_computed: 0,
            in_prefill: false,
            hashes: vec![],
            preemptions: 0,
            cached_tokens: 0,
            prefilled_think: false,
            think: None,
            sampling: None,
            taken: std::time::Instant::now(),
            first_token: None,
        };
        let at = |i| [0, 1, 2].map(|r| seq.position(r, i));
        assert_eq!(at(1), [1, 3, 2]);
        assert_eq!(at(2), [4, 4, 4]);
        assert_eq!(at(3), [5, 5, 5]);
        assert_eq!(seq.generated(), &[7, 8]);
    }

    #[test]
    fn seen_tokens_are_the_distinct_ids_in_order() {
        let mut seen = SeenTokens::of(&[9, 3, 9, 151655, 3]);
        assert_eq!(seen.ids(), &[3, 9, 151655]);
        seen.insert(5);
        seen.insert(9);
        assert_eq!(seen.ids(), &[3, 5, 9, 151655]);
    }
}
