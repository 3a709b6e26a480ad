//! The PMI-1 wire codec (and PMI-2's, in `v2.rs`): [`Message`] (both directions), its parser and
//! writer, the [`Framer`] for byte streams, and the [`limits`].
//!
//! `parse.rs` and `write.rs` are the only places that know field names and
//! order; `escape.rs` the only place that knows how a value is spelled;
//! `spawn.rs` handles the multi-line `mcmd=spawn` block. The `group_*`
//! lines are Rivet's extension; `group_connect_result` is followed by one
//! `group_member` line per member, and `group_event` comes unasked.

mod escape;
mod framer;
pub mod limits;
mod message;
mod parse;
mod spawn;
pub mod v2;
pub mod v2_spawn;
mod write;

#[cfg(test)]
mod exact_tests;
#[cfg(test)]
mod framer_tests;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod v2_tests;

pub use framer::{Frame, Framer};
pub use limits::Limits;
pub use message::{query_name, response_name, Message, SpawnCommand, SpawnRequest};
pub use parse::peek_cmd;
