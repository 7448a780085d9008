//! verisample: turn a visual-QA dataset into verified training data with a VLM.

pub mod atomic;
pub mod bench;
pub mod check;
pub mod clean;
pub mod cli;
pub mod commands;
pub mod dataset;
pub mod engine;
pub mod family;
pub mod judge;
pub mod record;
pub mod route;
pub mod verify;
pub mod verify_output;
