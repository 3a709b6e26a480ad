//! Topology keys: what the launcher publishes about placement and how ranks read it.
//! (Owned by the topology work; being written.)
