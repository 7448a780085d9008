//! verisample: turn a visual-QA dataset into verified training data with a VLM.

pub mod journal;
pub mod merge;
pub mod pipeline;
pub mod record;
pub mod report;
pub mod settings;
pub mod shard;
