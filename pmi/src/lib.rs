//! PMI-1 for Rivet (being written).

pub mod topology;
