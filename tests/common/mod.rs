//! Shared helpers of the engine integration tests.

pub mod mock;
