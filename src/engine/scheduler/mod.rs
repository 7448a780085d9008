//! Continuous-batching scheduler: a waiting queue and a running set over one
//! [`BlockManager`]; each step is either a prefill of newly admitted sequences (ragged, no
//! padding, up to `max_batch_tokens` new tokens, chunked if one prompt is longer) or a decode
//! of one token for every running sequence.
//!
//! Policy (vLLM's v0 scheduler, first-come first-served): admit from the head of the waiting
//! queue while there is room (`max_batch` sequences, token budget, free blocks above a small
//! watermark); prefill has priority over decode. When a decode step finds no free block for a
//! sequence, the youngest running sequence (latest arrival) is preempted: its blocks are
//! released and it goes back to the head of the waiting queue to be recomputed later (prompt
//! and the tokens it already generated), so no item is ever dropped.
//!
//! The scheduler holds pure state: it never touches tensors. The engine turns a [`Schedule`]
//! into a `BatchMeta`, runs the model, and reports back with [`Scheduler::commit`],
//! [`Scheduler::append_generated`] and [`Scheduler::finish`].

use std::collections::{HashMap, HashSet, VecDeque};

use super::block_manager::{BlockHash, BlockManager};
use super::sequence::Sequence;

/// Scheduling limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SchedulerConfig {
    /// Most sequences in the running set (≥ 1).
    pub max_batch: usize,
    /// Most new tokens in one prefill step (≥ 1); a longer prompt is prefilled in chunks.
    pub max_batch_tokens: usize,
    /// Free blocks kept back when admitting while other sequences run, so that running
    /// sequences can grow without immediate preemption (vLLM uses 1 % of the pool).
    pub watermark_blocks: usize,
}

/// Whether a step fills prompts or decodes one token per running sequence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepKind {
    /// New tokens of (re)admitted sequences.
    Prefill,
    /// One token for every running sequence.
    Decode,
}

/// One sequence's share of a step: compute tokens `start..end` (K/V for cache positions
/// `start..end`); `sample` when `end` reaches the end of its tokens (its last row gives the
/// next token).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScheduledSeq {
    /// Sequence key (arrival order).
    pub seq: u64,
    /// First token computed in this step.
    pub start: usize,
    /// One past the last token computed.
    pub end: usize,
    /// Whether to sample a token from this sequence's last row.
    pub sample: bool,
}

impl ScheduledSeq {
    /// The next prefill chunk of sequence `seq` with `computed` of its `len` tokens in the
    /// KV cache: as many tokens as `budget` allows, taken from it; sampled when the chunk
    /// reaches the end of the prompt.
    fn prefill_chunk(seq: u64, computed: usize, len: usize, budget: &mut usize) -> Self {
        let n = (len - computed).min(*budget);
        *budget -= n;
        let end = computed + n;
        ScheduledSeq {
            seq,
            start: computed,
            end,
            sample: end == len,
        }
    }
}

/// Why a sequence leaves the scheduler without finishing normally.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dropout {
    /// Its prompt alone needs more blocks than the whole pool (`needed`, `pool`): an error.
    PromptTooLong {
        /// Blocks the prompt needs.
        needed: usize,
        /// Blocks in the pool.
        pool: usize,
    },
    /// It already generated tokens and its context now fills the whole pool: truncated.
    PoolFull,
}

/// The work of one step.
#[derive(Debug, Clone)]
pub struct Schedule {
    /// Prefill or decode.
    pub kind: StepKind,
    /// Scheduled sequences, in running-set order (oldest first).
    pub seqs: Vec<ScheduledSeq>,
    /// Sequences removed this step that can never run: the engine completes them.
    pub dropped: Vec<(Sequence, Dropout)>,
    /// Sequences preempted while building this step (keys).
    pub preempted: Vec<u64>,
}

/// Waiting queue, running set and block accounting.
#[derive(Debug)]
pub struct Scheduler {
    cfg: SchedulerConfig,
    blocks: BlockManager,
    seqs: HashMap<u64, Sequence>,
    waiting: VecDeque<u64>,
    /// Running keys sorted by arrival (oldest first, youngest last).
    running: Vec<u64>,
}

impl Scheduler {
    /// A scheduler over `blocks` with the given limits (zero limits are raised to 1).
    pub fn new(mut cfg: SchedulerConfig, blocks: BlockManager) -> Self {
        cfg.max_batch = cfg.max_batch.max(1);
        cfg.max_batch_tokens = cfg.max_batch_tokens.max(1);
        Self {
            cfg,
            blocks,
            seqs: HashMap::new(),
            waiting: VecDeque::new(),
            running: Vec::new(),
        }
    }

    /// The block manager (read-only).
    pub fn blocks(&self) -> &BlockManager {
        &self.blocks
    }

    /// A sequence by key.
    pub fn seq(&self, key: u64) -> Option<&Sequence> {
        self.seqs.get(&key)
    }

    /// Keys of the waiting queue, head first.
    pub fn waiting(&self) -> impl Iterator<Item = u64> + '_ {
        self.waiting.iter().copied()
    }

    /// Keys of the running set, oldest first.
    pub fn running(&self) -> &[u64] {
        &self.running
    }

    /// Sequences not finished (waiting or running).
    pub fn num_unfinished(&self) -> usize {
        self.seqs.len()
    }

    /// Number of waiting sequences.
    pub fn num_waiting(&self) -> usize {
        self.waiting.len()
    }

    /// Queue a new sequence at the tail of the waiting queue. Its `arrival` must be larger
    /// than every earlier one's (the engine numbers them).
    pub fn add(&mut self, seq: Sequence) {
        let key = seq.arrival;
        self.waiting.push_back(key);
        self.seqs.insert(key, seq);
    }

    /// Plan the next step, or `None` when nothing is waiting or running (dropped sequences
    /// are still reported in a schedule with no `seqs`).
    pub fn schedule(&mut self) -> Option<Schedule> {
        let mut dropped = Vec::new();
        let prefill = self.schedule_prefill(&mut dropped);
        if !prefill.is_empty() {
            return Some(Schedule {
                kind: StepKind::Prefill,
                seqs: prefill,
                dropped,
                preempted: vec![],
            });
        }
        let mut preempted = Vec::new();
        let decode = self.schedule_decode(&mut dropped, &mut preempted);
        if decode.is_empty() && dropped.is_empty() {
            return None;
        }
        Some(Schedule {
            kind: StepKind::Decode,
            seqs: decode,
            dropped,
            preempted,
        })
    }

    fn schedule_prefill(&mut self, dropped: &mut Vec<(Sequence, Dropout)>) -> Vec<ScheduledSeq> {
        let bs = self.blocks.block_size();
        let mut out = Vec::new();
        let mut budget = self.cfg.max_batch_tokens;
        // 1. Running sequences in the middle of a chunked prefill.
        for &key in &self.running {
            let s = &self.seqs[&key];
            if !s.in_prefill || budget == 0 {
                continue;
            }
            out.push(ScheduledSeq::prefill_chunk(
                key,
                s.num_computed,
                s.tokens.len(),
                &mut budget,
            ));
        }
        // 2. Admissions from the head of the waiting queue.
        let mut pending: HashSet<BlockHash> = HashSet::new();
        while let Some(&key) = self.waiting.front() {
            if self.running.len() >= self.cfg.max_batch || budget == 0 {
                break;
            }
            let pool = self.blocks.num_blocks();
            let Some(s) = self.seqs.get_mut(&key) else {
                break;
            };
            let total_blocks = self.blocks.blocks_for(s.tokens.len());
            if total_blocks > pool {
                let why = if s.generated().is_empty() {
                    Dropout::PromptTooLong {
                        needed: total_blocks,
                        pool,
                    }
                } else {
                    Dropout::PoolFull
                };
                self.waiting.pop_front();
                if let Some(s) = self.seqs.remove(&key) {
                    dropped.push((s, why));
                }
                continue;
            }
            // Full blocks that may come from the cache: all but the last token must be
            // computed here, so at most (len - 1) / block_size blocks.
            let cacheable = (s.tokens.len() - 1) / bs;
            s.ensure_hashes(cacheable, bs);
            let hashes = &s.hashes[..cacheable.min(s.hashes.len())];
            let hits = self.blocks.count_hits(hashes);
            if hits < hashes.len() && pending.contains(&hashes[hits]) {
                // Its next block is being computed by a sequence in this very step:
                // admit it next step, as a cache hit.
                break;
            }
            let reserve = if self.running.is_empty() {
                0
            } else {
                self.cfg.watermark_blocks
            };
            if self.blocks.blocks_needed(hashes, total_blocks) + reserve > self.blocks.num_free() {
                break;
            }
            let Ok((table, hits)) = self.blocks.allocate(hashes, total_blocks) else {
                break;
            };
            pending.extend(hashes[hits..].iter().copied());
            s.block_table = table;
            s.num_computed = hits * bs;
            s.cached_tokens = s.num_computed;
            s.in_prefill = true;
            out.push(ScheduledSeq::prefill_chunk(
                key,
                s.num_computed,
                s.tokens.len(),
                &mut budget,
            ));
            self.waiting.pop_front();
            let at = self.running.partition_point(|&r| r < key);
            self.running.insert(at, key);
        }
        out.sort_by_key(|s| s.seq);
        out
    }

    fn schedule_decode(
        &mut self,
        dropped: &mut Vec<(Sequence, Dropout)>,
        preempted: &mut Vec<u64>,
    ) -> Vec<ScheduledSeq> {
        let bs = self.blocks.block_size();
        let mut i = 0;
        'seqs: while i < self.running.len() {
            let key = self.running[i];
            loop {
                let s = &self.seqs[&key];
                if s.num_computed < s.block_table.len() * bs {
                    break;
                }
                if self.blocks.num_free() > 0 {
                    let s = self.seqs.get_mut(&key).expect("running key has a sequence");
                    // num_free > 0 was just checked.
                    let _ = self.blocks.append_block(&mut s.block_table);
                    break;
                }
                let victim = *self.running.last().expect("running is not empty here");
                if victim == key && self.running.len() == 1 {
                    // Alone and the pool is full of its own context: it cannot grow.
                    self.running.pop();
                    if let Some(mut s) = self.seqs.remove(&key) {
                        self.blocks.release(&s.block_table);
                        s.block_table.clear();
                        dropped.push((s, Dropout::PoolFull));
                    }
                    continue 'seqs;
                }
                self.preempt_youngest();
                preempted.push(victim);
                if victim == key {
                    continue 'seqs;
                }
            }
            i += 1;
        }
        self.running
            .iter()
            .map(|&key| {
                let s = &self.seqs[&key];
                ScheduledSeq {
                    seq: key,
                    start: s.num_computed,
                    end: s.num_computed + 1,
                    sample: true,
                }
            })
            .collect()
    }

    /// Preempt the youngest running sequence: release its blocks, forget its cache state and
    /// put it at the head of the waiting queue (recompute on readmission).
    fn preempt_youngest(&mut self) {
        let Some(key) = self.running.pop() else {
            return;
        };
        if let Some(s) = self.seqs.get_mut(&key) {
            self.blocks.release(&s.block_table);
            s.block_table.clear();
            s.num_computed = 0;
            s.in_prefill = false;
            s.preemptions += 1;
        }
        self.waiting.push_front(key);
    }

    /// Record that a planned step ran: each scheduled sequence now has `end` tokens in the
    /// cache, and every newly completed full block is registered in the prefix cache.
    pub fn commit(&mut self, schedule: &Schedule) {
        let bs = self.blocks.block_size();
        for sc in &schedule.seqs {
            let Some(s) = self.seqs.get_mut(&sc.seq) else {
                continue;
            };
            let before = s.num_computed / bs;
            s.num_computed = sc.end;
            let after = s.num_computed / bs;
            if self.blocks.prefix_caching() && after > before {
                s.ensure_hashes(after, bs);
                for b in before..after {
                    self.blocks.register(s.block_table[b], s.hashes[b]);
                }
            }
            if sc.sample {
                s.in_prefill = false;
            }
        }
    }

    /// Append the token sampled for a sequence, or in its place the next token of its
    /// thinking budget's early-stopping text ([`super::think_budget`], with the model's
    /// reasoning tags `think`); returns the token appended.
    pub fn append_generated(
        &mut self,
        key: u64,
        sampled: u32,
        think: Option<&super::think_budget::ThinkTokens>,
    ) -> u32 {
        let Some(s) = self.seqs.get_mut(&key) else {
            return sampled;
        };
        let token = match (&mut s.think, think) {
            (Some(b), Some(_)) => b.next(sampled),
            _ => sampled,
        };
        s.push_token(token);
        let generated = s.tokens.len() - s.prompt_len;
        if let (Some(b), Some(t)) = (&mut s.think, think) {
            b.observe(token, generated, t);
        }
        token
    }

    /// Empty the prefix cache (between `generate` calls, with no sequence left).
    pub fn clear_prefix_cache(&mut self) {
        self.blocks.forget_cached();
    }

    /// Remove a finished sequence (running or waiting), releasing its blocks at once.
    pub fn finish(&mut self, key: u64) -> Option<Sequence> {
        let mut s = self.seqs.remove(&key)?;
        self.blocks.release(&s.block_table);
        s.block_table.clear();
        self.running.retain(|&k| k != key);
        self.waiting.retain(|&k| k != key);
        Some(s)
    }
}

#[cfg(test)]
mod tests;
