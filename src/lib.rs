//! verisample: turn a visual-QA dataset into verified training data with a VLM.

pub mod record;
pub mod engine;
