//! verisample: turn a visual-QA dataset into verified training data with a VLM.

pub mod atomic;
pub mod cli;
pub mod dataset;
pub mod family;
pub mod record;
