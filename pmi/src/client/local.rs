//! What a singleton (no process manager) keeps in-process: its own KVS,
//! name table and connects to itself, so code written against PMI runs
//! unchanged as one rank.

use std::collections::HashMap;

use crate::client::groups::LocalGroups;
use crate::error::{Error, Result};
use crate::server::names::NameService;
use crate::server::PROCESS_MAPPING_KEY;

#[derive(Debug, Default)]
pub(crate) struct Local {
    kvs: HashMap<String, String>,
    names: NameService,
    pub groups: LocalGroups,
}

impl Local {
    pub fn put(&mut self, key: &str, value: &str) {
        self.kvs.insert(key.to_string(), value.to_string());
    }

    pub fn get(&self, key: &str) -> Result<String> {
        if key == PROCESS_MAPPING_KEY {
            // One rank on one node.
            return Ok("(vector,(0,1,1))".to_string());
        }
        self.kvs
            .get(key)
            .cloned()
            .ok_or_else(|| Error::KeyNotFound {
                key: key.to_string(),
            })
    }

    fn name_error(cmd: &str, e: crate::server::names::NameError) -> Error {
        Error::Server {
            cmd: cmd.to_string(),
            rc: 1,
            msg: Some(e.code().to_string()),
        }
    }

    pub fn publish(&mut self, service: &str, port: &str) -> Result<()> {
        self.names
            .publish(service, port)
            .map_err(|e| Local::name_error("publish_name", e))
    }

    pub fn unpublish(&mut self, service: &str) -> Result<()> {
        self.names
            .unpublish(service)
            .map_err(|e| Local::name_error("unpublish_name", e))
    }

    pub fn lookup(&self, service: &str) -> Result<String> {
        self.names
            .lookup(service)
            .map(str::to_string)
            .map_err(|e| Local::name_error("lookup_name", e))
    }
}
