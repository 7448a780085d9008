//! Benchmark families: the constants that tie a family to its task.

/// The OrandCar user text (SPEC §4), byte-identical to what the model receives: the only
/// question task purity keeps for the `OrandCar` family (SPEC §3).
pub const ORAND_CAR_QUESTION: &str = "What is written in the image? Answer this question using the text in the image directly without any other context. Answer in short without any other content.";

/// The OrandCar family name as used in split names (`OrandCar_RS_think`).
pub const ORAND_CAR: &str = "OrandCar";
