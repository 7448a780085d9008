//! verisample: turn a visual-QA dataset into verified training data with a VLM.

pub mod atomic;
pub mod bench;
pub mod check;
pub mod clean;
pub mod cli;
pub mod dataset;
pub mod doctor;
pub mod engine;
pub mod family;
pub mod journal;
pub mod judge;
pub mod merge;
pub mod out_files;
pub mod pipeline;
pub mod record;
pub mod report;
pub mod route;
pub mod run_json;
pub mod settings;
pub mod shard;
pub mod verifiers;
pub mod verify_output;
pub mod view;
