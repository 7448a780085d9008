//! Block manager of the paged KV cache: which cache blocks are free, which sequence holds
//! which blocks, and the prefix cache (full blocks found again by a content hash).
//!
//! The pool itself (`models::batch::KvCache`, one preallocated `[num_blocks, block_size,
//! n_kv_heads, head_dim]` tensor pair per layer) is fixed at start; this module only does the
//! accounting, in block ids `0..num_blocks`. It follows vLLM's design (PagedAttention, Kwon et
//! al. 2023; automatic prefix caching): every block has a reference count; a full block whose
//! KV has been computed can be *registered* under the hash of its content and its whole prefix
//! ([`super::sequence::block_hashes`]); a later sequence with the same prefix takes the same
//! block (ref count + 1) instead of recomputing it. A registered block whose ref count drops to
//! 0 stays in the prefix cache as *evictable* until a fresh allocation needs it, oldest
//! release first (LRU).
//!
//! Unlike vLLM's single free queue, which cycles through the whole pool, a fresh block is the
//! lowest free id among the blocks handed out before (the *touched* ones, below a high-water
//! mark), else an evicted cached block, else the lowest never-used id. The blocks in use stay
//! packed at the start of the pool, so the memory a run touches is its working set, not the
//! whole pool: on the CPU, whose pool is plain memory whose pages become resident when first
//! written, resident memory then stops growing with the number of rows.
//!
//! Everything here is deterministic: same calls, same block ids.

use std::collections::{BTreeMap, BTreeSet, HashMap};

/// Index of a block in the KV cache pool, `0..num_blocks`.
pub type BlockId = u32;

/// Content hash of a full block and its whole prefix (see [`super::sequence::block_hashes`]).
pub type BlockHash = u128;

/// Not enough free blocks for a request; nothing was changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("KV cache pool exhausted: need {needed} free blocks, {free} available")]
pub struct OutOfBlocks {
    /// Blocks the request needed.
    pub needed: usize,
    /// Blocks that could have been given (free or evictable).
    pub free: usize,
}

/// Free-block and prefix-cache accounting for a pool of `num_blocks` blocks of
/// `block_size` tokens.
#[derive(Debug, Clone)]
pub struct BlockManager {
    block_size: usize,
    prefix_caching: bool,
    /// Users per block (sequences whose block table holds it).
    ref_counts: Vec<u32>,
    /// The hash a block is registered under in the prefix cache, if any.
    hash_of: Vec<Option<BlockHash>>,
    /// Registered blocks by hash.
    cached: HashMap<BlockHash, BlockId>,
    /// Free blocks holding nothing reusable, lowest id first.
    free_plain: BTreeSet<BlockId>,
    /// Blocks `0..high_water` have been handed out at least once (touched).
    high_water: BlockId,
    /// Free but registered blocks, by release tick (LRU order: smallest tick is evicted first).
    evictable: BTreeMap<u64, BlockId>,
    /// Release tick of each evictable block (key into `evictable`).
    evict_tick: Vec<u64>,
    tick: u64,
}

impl BlockManager {
    /// A manager of `num_blocks` free blocks of `block_size` tokens; `prefix_caching` turns
    /// registration and lookup of full blocks on or off.
    pub fn new(num_blocks: usize, block_size: usize, prefix_caching: bool) -> Self {
        let n = u32::try_from(num_blocks).unwrap_or(u32::MAX);
        Self {
            block_size,
            prefix_caching,
            ref_counts: vec![0; n as usize],
            hash_of: vec![None; n as usize],
            cached: HashMap::new(),
            free_plain: (0..n).collect(),
            high_water: 0,
            evictable: BTreeMap::new(),
            evict_tick: vec![0; n as usize],
            tick: 0,
        }
    }

    /// Tokens per block.
    pub fn block_size(&self) -> usize {
        self.block_size
    }

    /// Blocks in the pool.
    pub fn num_blocks(&self) -> usize {
        self.ref_counts.len()
    }

    /// Blocks a fresh allocation can take now: plain free blocks plus evictable cached ones.
    pub fn num_free(&self) -> usize {
        self.free_plain.len() + self.evictable.len()
    }

    /// Whether prefix caching is on.
    pub fn prefix_caching(&self) -> bool {
        self.prefix_caching
    }

    /// Blocks needed to hold `num_tokens` tokens (`ceil(num_tokens / block_size)`).
    pub fn blocks_for(&self, num_tokens: usize) -> usize {
        num_tokens.div_ceil(self.block_size)
    }

    /// Users of `block` (0 when free).
    pub fn ref_count(&self, block: BlockId) -> u32 {
        self.ref_counts[block as usize]
    }

    /// Whether a block is registered under `hash` in the prefix cache (in use or evictable).
    pub fn is_cached(&self, hash: BlockHash) -> bool {
        self.prefix_caching && self.cached.contains_key(&hash)
    }

    /// How many leading `hashes` are registered in the prefix cache (0 when caching is off).
    pub fn count_hits(&self, hashes: &[BlockHash]) -> usize {
        if !self.prefix_caching {
            return 0;
        }
        hashes
            .iter()
            .take_while(|h| self.cached.contains_key(h))
            .count()
    }

    /// Fresh blocks an allocation of `total_blocks` with prefix `hashes` would take from the
    /// free pool: the blocks not found in the cache, plus the cache hits that are evictable
    /// now (taking them removes them from the free pool).
    pub fn blocks_needed(&self, hashes: &[BlockHash], total_blocks: usize) -> usize {
        let hits = self.count_hits(hashes).min(total_blocks);
        let evictable_hits = hashes[..hits]
            .iter()
            .filter(|h| self.ref_counts[self.cached[*h] as usize] == 0)
            .count();
        total_blocks - hits + evictable_hits
    }

    /// Allocate a block table of `total_blocks` blocks whose leading blocks are taken from the
    /// prefix cache where `hashes` (hashes of the leading full blocks) are registered.
    ///
    /// Returns the table and how many leading blocks were cache hits (their KV is already
    /// computed). Errors with [`OutOfBlocks`] and changes nothing when the free pool is short.
    pub fn allocate(
        &mut self,
        hashes: &[BlockHash],
        total_blocks: usize,
    ) -> Result<(Vec<BlockId>, usize), OutOfBlocks> {
        let needed = self.blocks_needed(hashes, total_blocks);
        if needed > self.num_free() {
            return Err(OutOfBlocks {
                needed,
                free: self.num_free(),
            });
        }
        let hits = self.count_hits(hashes).min(total_blocks);
        let mut table = Vec::with_capacity(total_blocks);
        for h in &hashes[..hits] {
            let b = self.cached[h];
            self.take_ref(b);
            table.push(b);
        }
        for _ in hits..total_blocks {
            // Checked above: enough free blocks.
            table.push(self.pop_free().ok_or(OutOfBlocks { needed, free: 0 })?);
        }
        Ok((table, hits))
    }

    /// Append one fresh block to `table`. Errors with [`OutOfBlocks`] when none is free.
    pub fn append_block(&mut self, table: &mut Vec<BlockId>) -> Result<(), OutOfBlocks> {
        let b = self.pop_free().ok_or(OutOfBlocks { needed: 1, free: 0 })?;
        table.push(b);
        Ok(())
    }

    /// Register a computed full block under `hash` so that later sequences can share it.
    /// A no-op when caching is off, when the block is already registered, or when another
    /// block already holds this hash (the first one stays canonical).
    pub fn register(&mut self, block: BlockId, hash: BlockHash) {
        if !self.prefix_caching || self.hash_of[block as usize].is_some() {
            return;
        }
        if let std::collections::hash_map::Entry::Vacant(e) = self.cached.entry(hash) {
            e.insert(block);
            self.hash_of[block as usize] = Some(hash);
        }
    }

    /// Unregister every free cached block: the evictable ones become plain free blocks, so
    /// that no later prompt hits what earlier ones computed. Blocks in use keep their hash.
    pub fn forget_cached(&mut self) {
        for (_, b) in std::mem::take(&mut self.evictable) {
            if let Some(h) = self.hash_of[b as usize].take() {
                self.cached.remove(&h);
            }
            self.free_plain.insert(b);
        }
    }

    /// Release a sequence's block table: ref count − 1 for each block, tail first, so that
    /// the tail of a released prefix is evicted before its head. A block reaching 0 users goes
    /// to the evictable LRU if it is registered, else back to the plain free list.
    pub fn release(&mut self, table: &[BlockId]) {
        for &b in table.iter().rev() {
            let rc = &mut self.ref_counts[b as usize];
            debug_assert!(*rc > 0, "double free of block {b}");
            *rc = rc.saturating_sub(1);
            if *rc == 0 {
                if self.hash_of[b as usize].is_some() {
                    self.tick += 1;
                    self.evict_tick[b as usize] = self.tick;
                    self.evictable.insert(self.tick, b);
                } else {
                    self.free_plain.insert(b);
                }
            }
        }
    }

    /// Take one more reference on a registered block (removing it from the LRU if it was free).
    fn take_ref(&mut self, b: BlockId) {
        if self.ref_counts[b as usize] == 0 {
            self.evictable.remove(&self.evict_tick[b as usize]);
        }
        self.ref_counts[b as usize] += 1;
    }

    /// A fresh block with ref count 1: the lowest plain free block already touched, else the
    /// least recently released cached block (dropped from the prefix cache), else the lowest
    /// never-used block (raising the high-water mark).
    fn pop_free(&mut self) -> Option<BlockId> {
        let touched = self
            .free_plain
            .first()
            .copied()
            .filter(|&b| b < self.high_water);
        let b = match (touched, self.evictable.pop_first()) {
            (Some(b), evicted) => {
                if let Some((tick, e)) = evicted {
                    self.evictable.insert(tick, e);
                }
                self.free_plain.remove(&b);
                b
            }
            (None, Some((_, b))) => {
                if let Some(h) = self.hash_of[b as usize].take() {
                    self.cached.remove(&h);
                }
                b
            }
            (None, None) => {
                let b = self.free_plain.pop_first()?;
                self.high_water = self.high_water.max(b + 1);
                b
            }
        };
        self.ref_counts[b as usize] = 1;
        Some(b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fresh_allocation_takes_lowest_ids_and_release_returns_them() {
        let mut bm = BlockManager::new(4, 16, true);
        let (t, hits) = bm.allocate(&[], 3).unwrap();
        assert_eq!((t.clone(), hits), (vec![0, 1, 2], 0));
        assert_eq!(bm.num_free(), 1);
        assert_eq!(
            bm.allocate(&[], 2).unwrap_err(),
            OutOfBlocks { needed: 2, free: 1 }
        );
        assert_eq!(bm.num_free(), 1, "failed allocation changes nothing");
        bm.release(&t);
        assert_eq!(bm.num_free(), 4);
        // The touched blocks again, lowest first, then the never-used one.
        let (t2, _) = bm.allocate(&[], 4).unwrap();
        assert_eq!(t2, vec![0, 1, 2, 3]);
    }

    #[test]
    fn a_working_set_stays_at_the_start_of_the_pool() {
        // 1000 sequences of 3 blocks, 2 at a time, each with its own registered prefix: the
        // blocks handed out never go past what two sequences hold at once, as cached blocks
        // are evicted before a never-used block is touched.
        let mut bm = BlockManager::new(1000, 16, true);
        let mut highest = 0;
        let mut running: Vec<Vec<BlockId>> = Vec::new();
        for seq in 0..1000u128 {
            let hashes = [seq * 10 + 1, seq * 10 + 2];
            let (t, hits) = bm.allocate(&hashes, 3).unwrap();
            assert_eq!(hits, 0);
            for (b, h) in t.iter().zip(hashes) {
                bm.register(*b, h);
            }
            highest = highest.max(*t.iter().max().unwrap());
            running.push(t);
            if running.len() == 2 {
                bm.release(&running.remove(0));
            }
        }
        assert!(highest < 6, "touched up to block {highest}");
        assert_eq!(bm.num_free(), 1000 - 3);
    }

    /// After `forget_cached` a released prefix is no hit and its blocks are plain free; a
    /// prefix still in use keeps its registration.
    #[test]
    fn forgetting_the_cache_drops_only_free_registered_blocks() {
        let mut bm = BlockManager::new(6, 4, true);
        let (a, _) = bm.allocate(&[11, 22], 2).unwrap();
        let (b, _) = bm.allocate(&[33], 1).unwrap();
        bm.register(a[0], 11);
        bm.register(a[1], 22);
        bm.register(b[0], 33);
        bm.release(&a);
        assert_eq!(bm.count_hits(&[11, 22]), 2);
        bm.forget_cached();
        assert_eq!(bm.count_hits(&[11, 22]), 0, "released prefix forgotten");
        assert_eq!(bm.count_hits(&[33]), 1, "a block in use keeps its hash");
        assert_eq!(bm.num_free(), 5);
        // The forgotten blocks are handed out again, lowest first, as fresh ones.
        let (c, hits) = bm.allocate(&[11, 22], 2).unwrap();
        assert_eq!((c, hits), (vec![0, 1], 0));
    }

    #[test]
    fn shared_prefix_counts_references_and_frees_on_last_release() {
        let mut bm = BlockManager::new(6, 4, true);
        let (a, hits) = bm.allocate(&[11, 22], 3).unwrap();
        assert_eq!(
            (a.clone(), hits),
            (vec![0, 1, 2], 0),
            "nothing registered yet"
        );
        bm.register(a[0], 11);
        bm.register(a[1], 22);
        assert_eq!(bm.count_hits(&[11, 22, 33]), 2);
        assert_eq!(
            bm.blocks_needed(&[11, 22], 3),
            1,
            "hits in use are not taken from the pool"
        );
        let (b, hits) = bm.allocate(&[11, 22], 3).unwrap();
        assert_eq!((b.clone(), hits), (vec![0, 1, 3], 2));
        assert_eq!(
            (bm.ref_count(0), bm.ref_count(1), bm.ref_count(3)),
            (2, 2, 1)
        );
        bm.release(&a);
        assert_eq!(
            (bm.ref_count(0), bm.ref_count(1), bm.ref_count(2)),
            (1, 1, 0)
        );
        assert_eq!(bm.num_free(), 3, "blocks 2, 4, 5");
        bm.release(&b);
        assert_eq!(bm.num_free(), 6);
        // Registered blocks 0 and 1 are evictable but still hit.
        assert_eq!(bm.count_hits(&[11, 22]), 2);
        assert_eq!(
            bm.blocks_needed(&[11, 22], 2),
            2,
            "evictable hits come out of the pool"
        );
        let (c, hits) = bm.allocate(&[11, 22], 2).unwrap();
        assert_eq!((c, hits), (vec![0, 1], 2));
        assert_eq!(bm.num_free(), 4);
    }

    #[test]
    fn eviction_is_lru_tail_first_and_drops_the_hash() {
        let mut bm = BlockManager::new(3, 4, true);
        let (a, _) = bm.allocate(&[], 3).unwrap();
        bm.register(a[0], 1);
        bm.register(a[1], 2);
        bm.release(&a);
        // Plain free: [2]; evictable in release order: 1 (hash 2), then 0 (hash 1).
        let (t, _) = bm.allocate(&[], 2).unwrap();
        assert_eq!(t, vec![2, 1]);
        assert_eq!(bm.count_hits(&[1]), 1);
        assert_eq!(
            bm.count_hits(&[2]),
            0,
            "block 1 was evicted, hash 2 is gone"
        );
        assert_eq!(bm.num_free(), 1);
    }

    #[test]
    fn register_keeps_the_first_block_for_a_hash_and_ignores_when_off() {
        let mut bm = BlockManager::new(2, 4, true);
        let (t, _) = bm.allocate(&[], 2).unwrap();
        bm.register(t[0], 7);
        bm.register(t[1], 7);
        bm.release(&t);
        // Block 1 was never registered: it is plain free and handed out first.
        let (u, hits) = bm.allocate(&[7], 2).unwrap();
        assert_eq!((u, hits), (vec![0, 1], 1));

        let mut off = BlockManager::new(2, 4, false);
        let (t, _) = off.allocate(&[], 1).unwrap();
        off.register(t[0], 7);
        assert_eq!(off.count_hits(&[7]), 0);
        assert!(!off.is_cached(7));
    }

    #[test]
    fn blocks_for_rounds_up() {
        let bm = BlockManager::new(1, 16, true);
        for (tokens, blocks) in [(0, 0), (1, 1), (16, 1), (17, 2), (32, 2), (33, 3)] {
            assert_eq!(bm.blocks_for(tokens), blocks, "{tokens} tokens");
        }
    }
}
