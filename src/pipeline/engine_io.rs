//! The product [`Generator`]: the batch [`Engine`] (continuous batching, greedy decoding over
//! the paged KV cache) behind the pipeline's request/result types.

use std::fmt;
use std::ops::ControlFlow;

use super::backend::{
    BackendError, FinishReason, GenRequest, GenResult, Generation, Generator, ItemKey, Pass,
};
use crate::engine::{self, Completion, Engine, EngineError, EngineModel, InputProcessor};
use crate::verifiers::think::AnswerFormat;

/// Returned by the completion callback to make the engine stop (a Ctrl-C or a journal
/// failure); [`EngineGenerator::generate`] turns it back into a clean return.
#[derive(Debug)]
struct Stopped;

impl fmt::Display for Stopped {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("stopped by the pipeline")
    }
}

impl std::error::Error for Stopped {}

/// The engine's [`Generator::version`], recorded in `run.json`.
pub const ENGINE_VERSION: &str = concat!("verisample-engine ", env!("CARGO_PKG_VERSION"));

/// The generator over [`crate::engine::vl::load_engine`]'s engine, whatever the family.
pub type LoadedGenerator = EngineGenerator<verisample_models::VlModel, crate::engine::vl::VlInputs>;

/// An [`Engine`] as the pipeline's [`Generator`]. Each [`GenRequest::think`] becomes the
/// engine request's thinking mode; whether the chat template then ended the prompt with an
/// open `<think>` comes back with each completion.
pub struct EngineGenerator<M, P> {
    engine: Engine<M, P>,
}

impl<M: EngineModel, P: InputProcessor> EngineGenerator<M, P> {
    /// Wrap a loaded engine.
    pub fn new(engine: Engine<M, P>) -> Self {
        EngineGenerator { engine }
    }

    /// The engine (for its statistics).
    pub fn engine(&self) -> &Engine<M, P> {
        &self.engine
    }

    /// The engine, to generate outside the pipeline (`bench`).
    pub fn engine_mut(&mut self) -> &mut Engine<M, P> {
        &mut self.engine
    }
}

fn to_result(c: Completion, key: ItemKey, pass: Pass, format: AnswerFormat) -> GenResult {
    let finish = match c.finish_reason {
        engine::FinishReason::Stop => FinishReason::Stop,
        engine::FinishReason::Length => FinishReason::Length,
        engine::FinishReason::Error => {
            return GenResult {
                key,
                pass,
                outcome: Err(c.error.unwrap_or_else(|| "request failed".into())),
                exceeds_capacity: c.exceeds_capacity,
            }
        }
    };
    GenResult {
        key,
        pass,
        outcome: Ok(Generation {
            text: c.text,
            token_ids: c.token_ids,
            prompt_tokens: c.prompt_tokens,
            finish,
            prefilled_think: c.prefilled_think,
            think_budget_hit: c.think_budget_hit,
            answer_format: format,
        }),
        exceeds_capacity: c.exceeds_capacity,
    }
}

impl<M: EngineModel, P: InputProcessor> Generator for EngineGenerator<M, P> {
    fn generate(
        &mut self,
        requests: Vec<GenRequest>,
        on_done: &mut dyn FnMut(GenResult) -> ControlFlow<()>,
    ) -> Result<(), BackendError> {
        let keys: Vec<(ItemKey, Pass)> = requests.iter().map(|r| (r.key, r.pass)).collect();
        let engine_requests = requests
            .into_iter()
            .enumerate()
            .map(|(i, r)| engine::Request {
                id: i as u64,
                system: None,
                image: r.image,
                text: r.user_text,
                max_new_tokens: Some(r.max_new_tokens),
                enable_thinking: Some(r.think),
                sampling: r.sampling,
                stop_token_ids: Vec::new(),
                think_budget: r.think_budget,
            });
        let format = self.engine.processor().answer_format();
        let result = self.engine.generate(engine_requests, |c: Completion| {
            let Some(&(key, pass)) = usize::try_from(c.id).ok().and_then(|i| keys.get(i)) else {
                return Ok(());
            };
            match on_done(to_result(c, key, pass, format)) {
                ControlFlow::Continue(()) => Ok(()),
                ControlFlow::Break(()) => Err(Box::new(Stopped)),
            }
        });
        match result {
            Ok(()) => Ok(()),
            Err(EngineError::Callback(e)) if e.is::<Stopped>() => Ok(()),
            Err(EngineError::Stopped) => Ok(()),
            Err(e) => Err(Box::new(e)),
        }
    }

    fn check_image(&self, _position: u64, width: u32, height: u32) -> Result<(), String> {
        self.engine.check_image(width, height)
    }

    fn version(&self) -> String {
        ENGINE_VERSION.to_string()
    }

    fn stats(&self) -> Option<serde_json::Value> {
        serde_json::to_value(self.engine.stats()).ok()
    }

    fn metrics(&self) -> Option<serde_json::Value> {
        let e = &self.engine;
        // A process that generated nothing (a rerun with nothing left) measured nothing.
        if e.stats().completed == 0 {
            return None;
        }
        let m = crate::engine::metrics::ThroughputMetrics::new(
            e.stats(),
            e.latency(),
            crate::engine::metrics::peak_rss_bytes(),
            e.device_memory_used(),
        );
        serde_json::to_value(m).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn completions_map_to_results() {
        let key = ItemKey::question(3, 1);
        let done = |finish_reason, error: Option<&str>| Completion {
            id: 0,
            token_ids: vec![1, 2],
            text: "42".into(),
            prompt_tokens: 9,
            generated_tokens: 2,
            cached_prompt_tokens: 0,
            finish_reason,
            error: error.map(str::to_string),
            exceeds_capacity: false,
            prefilled_think: true,
            think_budget_hit: false,
        };
        let r = to_result(
            done(engine::FinishReason::Stop, None),
            key,
            Pass::Answer,
            AnswerFormat::GlmBox,
        );
        let g = r.outcome.unwrap();
        assert_eq!(
            (
                g.finish,
                g.prompt_tokens,
                g.prefilled_think,
                g.answer_format
            ),
            (FinishReason::Stop, 9, true, AnswerFormat::GlmBox)
        );
        let r = to_result(
            done(engine::FinishReason::Length, None),
            key,
            Pass::Judge,
            AnswerFormat::AfterThink,
        );
        assert_eq!(r.outcome.unwrap().finish, FinishReason::Length);
        let r = to_result(
            done(engine::FinishReason::Error, Some("image: bad")),
            key,
            Pass::Answer,
            AnswerFormat::AfterThink,
        );
        assert!(!r.exceeds_capacity);
        assert_eq!(r.outcome.unwrap_err(), "image: bad");
        let r = to_result(
            Completion::exceeds_capacity(0, 300, "prompt of 300 tokens needs 19 KV cache blocks"),
            key,
            Pass::Judge,
            AnswerFormat::AfterThink,
        );
        assert!(r.exceeds_capacity);
        assert!(r.outcome.unwrap_err().starts_with("prompt of 300 tokens"));
    }
}
