//! PMI-1 for Rivet (placeholder; being written).
