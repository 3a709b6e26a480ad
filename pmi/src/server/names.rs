//! The name service behind `MPI_Publish_name` / `MPI_Lookup_name`.
//!
//! One table per server, shared by all namespaces, so a spawned job can look
//! up what its parent published. Like Hydra, publishing a taken name and
//! unpublishing or looking up a missing one are errors, not overwrites.

use std::collections::HashMap;

/// Most names one server holds; bounds memory against a runaway client.
pub const MAX_NAMES: usize = 65536;

/// Why a name-service request failed; `code()` is the wire `msg=`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameError {
    /// `publish_name` of a service that is already published.
    AlreadyPublished,
    /// `lookup_name`/`unpublish_name` of an unknown service.
    NotFound,
    /// The table is full.
    Full,
}

impl NameError {
    /// The `msg=` token sent to the client (Hydra's wording where it has one).
    pub fn code(self) -> &'static str {
        match self {
            NameError::AlreadyPublished => "key_already_present",
            NameError::NotFound => "service_not_found",
            NameError::Full => "name_table_full",
        }
    }
}

/// Service name → port name.
#[derive(Debug, Default)]
pub struct NameService {
    ports: HashMap<String, String>,
}

impl NameService {
    /// An empty table.
    pub fn new() -> NameService {
        NameService::default()
    }

    /// Publish `service` at `port`; a taken name is refused.
    pub fn publish(&mut self, service: &str, port: &str) -> Result<(), NameError> {
        if self.ports.contains_key(service) {
            return Err(NameError::AlreadyPublished);
        }
        if self.ports.len() >= MAX_NAMES {
            return Err(NameError::Full);
        }
        self.ports.insert(service.to_string(), port.to_string());
        Ok(())
    }

    /// Remove `service`.
    pub fn unpublish(&mut self, service: &str) -> Result<(), NameError> {
        self.ports
            .remove(service)
            .map(|_| ())
            .ok_or(NameError::NotFound)
    }

    /// The port `service` was published at.
    pub fn lookup(&self, service: &str) -> Result<&str, NameError> {
        self.ports
            .get(service)
            .map(String::as_str)
            .ok_or(NameError::NotFound)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn publish_lookup_unpublish() {
        let mut n = NameService::new();
        assert_eq!(n.lookup("a"), Err(NameError::NotFound));
        n.publish("a", "port-a").unwrap();
        assert_eq!(n.publish("a", "other"), Err(NameError::AlreadyPublished));
        assert_eq!(n.lookup("a"), Ok("port-a"));
        n.unpublish("a").unwrap();
        assert_eq!(n.unpublish("a"), Err(NameError::NotFound));
        n.publish("a", "again").unwrap();
        assert_eq!(n.lookup("a"), Ok("again"));
    }
}
