//! The name service: publish, look up and unpublish a port name.

use super::*;

impl Client {
    /// Publish `service` at `port` (server-wide; a taken name is an error).
    pub fn publish_name(&mut self, service: &str, port: &str) -> Result<()> {
        match &mut self.mode {
            Mode::Singleton(local) => local.publish(service, port),
            Mode::Pmix(p) => p.publish(service, port),
            Mode::Pmi2(p) => p.publish(service, port),
            Mode::Remote(conn) => {
                let msg = Message::PublishName {
                    service: service.to_string(),
                    port: port.to_string(),
                };
                check(conn.request(&msg, "publish_result")?, "publish_name").map(|_| ())
            }
        }
    }

    /// The port `service` was published at.
    pub fn lookup_name(&mut self, service: &str) -> Result<String> {
        match &mut self.mode {
            Mode::Singleton(local) => local.lookup(service),
            Mode::Pmix(p) => p.lookup(service),
            Mode::Pmi2(p) => p.lookup(service),
            Mode::Remote(conn) => {
                let msg = Message::LookupName {
                    service: service.to_string(),
                };
                match check(conn.request(&msg, "lookup_result")?, "lookup_name")? {
                    Message::LookupResult { port: Some(p), .. } => Ok(p),
                    _ => Err(Error::UnexpectedReply {
                        expected: "lookup_result",
                        got: "a successful lookup_result without port=".to_string(),
                    }),
                }
            }
        }
    }

    /// Withdraw `service`.
    pub fn unpublish_name(&mut self, service: &str) -> Result<()> {
        match &mut self.mode {
            Mode::Singleton(local) => local.unpublish(service),
            Mode::Pmix(p) => p.unpublish(service),
            Mode::Pmi2(p) => p.unpublish(service),
            Mode::Remote(conn) => {
                let msg = Message::UnpublishName {
                    service: service.to_string(),
                };
                check(conn.request(&msg, "unpublish_result")?, "unpublish_name").map(|_| ())
            }
        }
    }
}
