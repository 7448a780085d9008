//! VLM architectures on candle (Qwen2-VL, Qwen2.5-VL, Qwen3-VL), built for a batch engine.

pub mod batch;
