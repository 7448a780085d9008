//! verisample: turn a visual-QA dataset into verified training data with a VLM.

pub mod bench;
pub mod engine;
pub mod record;
