//! Recurrent-state slots of the running sequences (models with linear-attention layers): one
//! slot of [`verisample_models::batch::KvCache::states`] per running sequence.
//!
//! A sequence takes a free slot the first step it is scheduled in (admission) and keeps it
//! while it runs; a sequence no longer running (finished, dropped or preempted) gives its slot
//! back before the next step takes any. The model zeroes a slot whenever a sequence's step
//! starts at position 0 (`BatchMeta::state_slots`), so a reused slot, or a preempted sequence
//! recomputed from its first token, starts from zeros. With `max_batch` slots a slot is always
//! free for a newly running sequence, since at most `max_batch` sequences run.

use std::collections::HashMap;

use super::EngineError;

/// Which running sequence owns which state slot.
#[derive(Debug)]
pub(crate) struct StateSlots {
    owner: HashMap<u64, u32>,
    /// Free slots; the lowest is taken first.
    free: Vec<u32>,
}

impl StateSlots {
    /// `n` free slots (0 for a model without recurrent state).
    pub fn new(n: usize) -> Self {
        Self {
            owner: HashMap::new(),
            free: (0..n as u32).rev().collect(),
        }
    }

    /// Slots of `scheduled` (sequence keys of one step, in batch order), after giving back the
    /// slots of sequences not in `running`. Empty when there are no slots at all.
    ///
    /// Errors: [`EngineError::Internal`] when no slot is free (more running sequences than
    /// slots: a bug).
    pub fn assign(&mut self, running: &[u64], scheduled: &[u64]) -> Result<Vec<u32>, EngineError> {
        if self.owner.is_empty() && self.free.is_empty() {
            return Ok(Vec::new());
        }
        let gone: Vec<u64> = self
            .owner
            .keys()
            .filter(|k| !running.contains(k))
            .copied()
            .collect();
        for k in gone {
            if let Some(slot) = self.owner.remove(&k) {
                self.free.push(slot);
            }
        }
        // Lowest first, whatever order the slots came back in.
        self.free.sort_unstable_by(|a, b| b.cmp(a));
        scheduled
            .iter()
            .map(|&seq| {
                if let Some(&slot) = self.owner.get(&seq) {
                    return Ok(slot);
                }
                let slot = self.free.pop().ok_or_else(|| {
                    EngineError::Internal(format!(
                        "no free recurrent-state slot for sequence {seq} ({} taken)",
                        self.owner.len()
                    ))
                })?;
                self.owner.insert(seq, slot);
                Ok(slot)
            })
            .collect()
    }

    /// Give back every slot (after an interrupted `generate`).
    pub fn clear(&mut self) {
        self.free.extend(self.owner.drain().map(|(_, s)| s));
    }
}

#[cfg(test)]
mod tests {
    use super::StateSlots;

    /// Catches: a slot kept by a finished sequence (the third call would find none free), a
    /// running sequence moved to another slot (its state would be lost), or two sequences
    /// given one slot.
    #[test]
    fn slots_follow_the_running_set() {
        let mut s = StateSlots::new(2);
        assert_eq!(s.assign(&[7, 9], &[7, 9]).unwrap(), [0, 1]);
        assert_eq!(s.assign(&[7, 9], &[9]).unwrap(), [1]);
        // 7 finished (or was preempted): 4 takes its slot, 9 keeps its own.
        assert_eq!(s.assign(&[9, 4], &[9, 4]).unwrap(), [1, 0]);
        assert!(s.assign(&[9, 4, 5], &[9, 4, 5]).is_err());
        s.clear();
        assert_eq!(s.assign(&[5], &[5]).unwrap(), [0]);
        assert!(StateSlots::new(0).assign(&[1], &[1]).unwrap().is_empty());
    }
}
