//! A thinking budget: a sequence that has reasoned for `budget` tokens without closing its
//! reasoning gets the family's early-stopping text appended in place of its next sampled
//! tokens (closing the reasoning), then decodes its answer as usual.
//!
//! The rule is Qwen3's "thinking budget" (Qwen docs, quickstart "Thinking Budget"; vLLM
//! #18127): stop the reasoning once the budget is reached and guide the model to answer with
//! an early-stopping prompt. Here the text goes in token by token where sampled tokens would,
//! so every step stays a one-token decode step: a sequence's tokens depend on its own tokens
//! only, whatever the batch, and a preempted or resumed sequence replays the same way.

use std::collections::VecDeque;

/// The tokens a thinking budget works with, in the model's vocabulary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThinkTokens {
    /// The opening reasoning tag (`<think>`), when the vocabulary has it as one token.
    pub open: Option<u32>,
    /// The closing reasoning tag (`</think>`).
    pub close: u32,
    /// The early-stopping text, tokenized: it ends the reasoning (it holds `close`).
    pub stop: Vec<u32>,
}

/// One sequence's budget state.
#[derive(Debug, Clone)]
pub struct ThinkBudget {
    budget: usize,
    /// Generated tokens before the reasoning began (after the opening tag); `None` while it
    /// has not begun.
    started_at: Option<usize>,
    closed: bool,
    forced: VecDeque<u32>,
    /// The budget was reached and the early-stopping text appended.
    hit: bool,
}

impl ThinkBudget {
    /// A budget of `budget` reasoning tokens; `prefilled`: the prompt opened the reasoning
    /// (a budget of 0 then forces the early-stopping text from the first token on).
    pub fn new(budget: usize, prefilled: bool, tokens: &ThinkTokens) -> Self {
        let mut b = Self {
            budget,
            started_at: prefilled.then_some(0),
            closed: false,
            forced: VecDeque::new(),
            hit: false,
        };
        b.check(0, tokens);
        b
    }

    /// The token to append in place of the sampled one: the next token of the early-stopping
    /// text while it is pending, else `sampled`.
    pub fn next(&mut self, sampled: u32) -> u32 {
        self.forced.pop_front().unwrap_or(sampled)
    }

    /// Records `token`, just appended as the `generated`-th generated token.
    pub fn observe(&mut self, token: u32, generated: usize, tokens: &ThinkTokens) {
        if self.closed {
            return;
        }
        if token == tokens.close {
            self.closed = true;
        } else if self.started_at.is_none() && Some(token) == tokens.open {
            self.started_at = Some(generated);
        } else {
            self.check(generated, tokens);
        }
    }

    /// Whether the budget was reached.
    pub fn hit(&self) -> bool {
        self.hit
    }

    fn check(&mut self, generated: usize, tokens: &ThinkTokens) {
        if let Some(start) = self.started_at {
            if !self.hit && generated - start >= self.budget {
                self.hit = true;
                self.forced = tokens.stop.iter().copied().collect();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: fn() -> ThinkTokens = || ThinkTokens {
        open: Some(1),
        close: 2,
        stop: vec![7, 8, 2, 9],
    };

    /// Feeds `sampled` through a budget as the engine does; returns the appended tokens.
    fn run(budget: usize, prefilled: bool, sampled: &[u32]) -> (Vec<u32>, bool) {
        let t = T();
        let mut b = ThinkBudget::new(budget, prefilled, &t);
        let mut out = Vec::new();
        for &s in sampled {
            let tok = b.next(s);
            out.push(tok);
            b.observe(tok, out.len(), &t);
        }
        (out, b.hit())
    }

    #[test]
    fn a_prefilled_reasoning_is_cut_after_the_budget() {
        let (out, hit) = run(3, true, &[5, 5, 5, 5, 5, 5, 5, 5, 6]);
        assert_eq!(out, [5, 5, 5, 7, 8, 2, 9, 5, 6]);
        assert!(hit);
    }

    #[test]
    fn a_generated_open_tag_starts_the_count() {
        let (out, hit) = run(2, false, &[4, 1, 5, 5, 5, 5, 5, 5, 5]);
        assert_eq!(out, [4, 1, 5, 5, 7, 8, 2, 9, 5]);
        assert!(hit);
    }

    #[test]
    fn a_reasoning_closed_within_the_budget_is_untouched() {
        let sampled = [5, 5, 2, 5, 5, 5, 5, 5];
        let (out, hit) = run(3, true, &sampled);
        assert_eq!(out, sampled);
        assert!(!hit);
        // No reasoning at all: nothing is counted.
        let (out, hit) = run(0, false, &[5, 5, 5]);
        assert_eq!((out, hit), (vec![5, 5, 5], false));
    }

    #[test]
    fn a_zero_budget_forces_the_text_from_the_first_token() {
        let (out, hit) = run(0, true, &[5, 5, 5, 5, 5, 6]);
        assert_eq!(out, [7, 8, 2, 9, 5, 6]);
        assert!(hit);
    }
}
