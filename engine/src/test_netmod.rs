//! What every in-process test netmod answers alike: one peer, always
//! known and connected, no ports, no groups to refuse, a 1 KiB eager
//! limit. A fake writes only what its test is about (`try_send`, `poll`,
//! `idle`) and takes the rest from [`fake_netmod_rest!`].

/// The `Netmod` methods a test fake named `$name` does not care about.
macro_rules! fake_netmod_rest {
    ($name:literal) => {
        fn name(&self) -> &'static str {
            $name
        }
        fn business_card(&self) -> &str {
            $name
        }
        fn knows(&self, _: rivet_netmods::PeerId) -> bool {
            true
        }
        fn connect(
            &mut self,
            _: rivet_netmods::PeerId,
            _: &str,
        ) -> Result<(), rivet_netmods::NetmodError> {
            Ok(())
        }
        fn add_group(&mut self, _: u32, _: &str) -> Result<(), rivet_netmods::NetmodError> {
            Ok(())
        }
        fn remove_group(&mut self, _: u32) {}
        fn connect_port(
            &mut self,
            _: &str,
            _: u64,
        ) -> Result<rivet_netmods::PeerId, rivet_netmods::NetmodError> {
            Err(rivet_netmods::NetmodError::Unavailable($name.into()))
        }
        fn disconnect(&mut self, _: rivet_netmods::PeerId) {}
        fn peer_count(&self) -> usize {
            1
        }
        fn limits(&self) -> rivet_netmods::Limits {
            rivet_netmods::Limits {
                max_payload: 1 << 20,
                eager_max: 1024,
            }
        }
        fn describe(&self) -> Vec<(String, String)> {
            Vec::new()
        }
    };
}
pub(crate) use fake_netmod_rest;
