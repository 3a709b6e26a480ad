//! The job's key-value space: puts checked against the server's limits,
//! gets from this or another job, and job attributes.

use super::*;

impl Client {
    fn check_key(&self, key: &str) -> Result<()> {
        if key.is_empty() {
            return Err(Error::Malformed {
                reason: "empty PMI key".to_string(),
            });
        }
        if key.len() > self.limits.keylen_max {
            return Err(Error::TooLong {
                what: "key",
                len: key.len(),
                max: self.limits.keylen_max,
            });
        }
        Ok(())
    }

    /// Put `key=value` into this job's KVS. Visible to others after a
    /// [`Client::barrier`]. Keys starting with `PMI_` are reserved.
    pub fn put(&mut self, key: &str, value: &str) -> Result<()> {
        self.check_key(key)?;
        if key.starts_with(RESERVED_PREFIX) {
            return Err(Error::ReservedKey {
                key: key.to_string(),
            });
        }
        if value.len() > self.limits.vallen_max {
            return Err(Error::TooLong {
                what: "value",
                len: value.len(),
                max: self.limits.vallen_max,
            });
        }
        let msg = Message::Put {
            kvsname: self.kvs_name.clone(),
            key: key.to_string(),
            value: value.to_string(),
        };
        // Catches values that cannot be encoded or do not fit one line.
        msg.encode()?;
        match &mut self.mode {
            Mode::Singleton(local) => {
                local.put(key, value);
                Ok(())
            }
            Mode::Remote(conn) => check(conn.request(&msg, "put_result")?, "put").map(|_| ()),
            Mode::Pmix(p) => {
                p.put(key, value);
                Ok(())
            }
            Mode::Pmi2(p) => p.put(key, value),
        }
    }

    /// Kept for the PMI API: puts are sent at once on the PMI-1 wire.
    pub fn commit(&mut self) -> Result<()> {
        Ok(())
    }

    /// Get `key` from this job's KVS (or a job attribute such as
    /// `PMI_process_mapping`). A miss is [`Error::KeyNotFound`].
    pub fn get(&mut self, key: &str) -> Result<String> {
        let kvs = self.kvs_name.clone();
        self.get_from(&kvs, key)
    }

    /// Get `key` from the KVS named `kvsname` (e.g. another job's).
    pub fn get_from(&mut self, kvsname: &str, key: &str) -> Result<String> {
        self.check_key(key)?;
        if kvsname.len() > self.limits.kvsname_max {
            return Err(Error::TooLong {
                what: "kvsname",
                len: kvsname.len(),
                max: self.limits.kvsname_max,
            });
        }
        let not_found = || Error::KeyNotFound {
            key: key.to_string(),
        };
        let own = kvsname == self.kvs_name;
        let size = self.size;
        match &mut self.mode {
            Mode::Singleton(local) if own => local.get(key),
            Mode::Singleton(_) => Err(not_found()),
            // Job attributes (PMI_ keys) have no PMIx twin here, but for
            // the cluster id (`PMIX_CLUSTER_ID`).
            Mode::Pmix(p) if own && !key.starts_with(RESERVED_PREFIX) => {
                p.get(key, size)?.ok_or_else(not_found)
            }
            Mode::Pmix(p) if own && key == crate::group::KEY_CLUSTER => {
                p.cluster()?.ok_or_else(not_found)
            }
            Mode::Pmix(_) => Err(not_found()),
            // Job attributes are PMI-2's info-getjobattr (Slurm's KVS has none).
            Mode::Pmi2(p) if own && key.starts_with(RESERVED_PREFIX) => {
                p.job_attr(key)?.ok_or_else(not_found)
            }
            Mode::Pmi2(p) => p.get(kvsname, key)?.ok_or_else(not_found),
            Mode::Remote(conn) => {
                let msg = Message::Get {
                    kvsname: Some(kvsname.to_string()),
                    key: key.to_string(),
                };
                match conn.request(&msg, "get_result")? {
                    Message::GetResult {
                        rc: 0,
                        value: Some(v),
                        ..
                    } => Ok(v),
                    Message::GetResult { rc: 0, .. } => Err(not_found()),
                    // A failing get is a miss unless the server says otherwise
                    // (Hydra: `msg=key_..._not_found`, or no msg at all).
                    Message::GetResult { rc, msg, .. } => match msg {
                        None => Err(not_found()),
                        Some(m) if m.contains("not_found") || m.contains("not found") => {
                            Err(not_found())
                        }
                        Some(m) => Err(Error::Server {
                            cmd: "get".to_string(),
                            rc,
                            msg: Some(m),
                        }),
                    },
                    _ => unreachable_reply("get_result"),
                }
            }
        }
    }

    /// A job attribute answered by the process manager (`PMI_` keys, e.g.
    /// `PMI_process_mapping`; the prefix is added when missing). `None`
    /// when the process manager does not provide it.
    pub fn job_attribute(&mut self, key: &str) -> Result<Option<String>> {
        let full = if key.starts_with(RESERVED_PREFIX) {
            key.to_string()
        } else {
            format!("{RESERVED_PREFIX}{key}")
        };
        match self.get(&full) {
            Ok(v) => Ok(Some(v)),
            Err(Error::KeyNotFound { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }
}
