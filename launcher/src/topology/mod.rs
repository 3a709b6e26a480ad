//! Topology discovery, mapping and binding (being written).
