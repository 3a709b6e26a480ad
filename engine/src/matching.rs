//! MPI matching: posted receives and unexpected messages per context id.

pub const ANY_SOURCE: i32 = -1;
pub const ANY_TAG: i32 = -1;

/// What an arriving message is matched on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Envelope {
    pub context: u32,
    pub source: u32,
    pub tag: i32,
}

pub struct Matcher<R, M> {
    _p: std::marker::PhantomData<(R, M)>,
}

impl<R: Copy + Eq, M> Default for Matcher<R, M> {
    fn default() -> Self {
        Self::new()
    }
}

impl<R: Copy + Eq, M> Matcher<R, M> {
    pub fn new() -> Self {
        todo!()
    }

    /// Post a receive for (`context`, `source` or ANY_SOURCE, `tag` or
    /// ANY_TAG). If a matching message already waits, the earliest one is
    /// removed and returned and the receive is not stored.
    pub fn post(&mut self, context: u32, source: i32, tag: i32, recv: R) -> Option<(Envelope, M)> {
        let _ = (context, source, tag, recv);
        todo!()
    }

    /// A message arrived: remove and return the earliest-posted receive that
    /// matches it. `None`: store it with `push_unexpected`.
    pub fn match_posted(&mut self, env: Envelope) -> Option<R> {
        let _ = env;
        todo!()
    }

    pub fn push_unexpected(&mut self, env: Envelope, msg: M) {
        let _ = (env, msg);
        todo!()
    }

    /// The earliest unexpected message matching the pattern, left in place.
    pub fn probe(&self, context: u32, source: i32, tag: i32) -> Option<(Envelope, &M)> {
        let _ = (context, source, tag);
        todo!()
    }

    /// Withdraw a posted receive; false if it is no longer posted.
    pub fn cancel_posted(&mut self, recv: R) -> bool {
        let _ = recv;
        todo!()
    }

    /// Remove the earliest unexpected message on `context` that `pred` picks.
    pub fn remove_unexpected(
        &mut self,
        context: u32,
        pred: impl FnMut(&Envelope, &M) -> bool,
    ) -> Option<(Envelope, M)> {
        let _ = (context, pred);
        todo!()
    }

    pub fn posted_len(&self) -> usize {
        todo!()
    }

    pub fn unexpected_len(&self) -> usize {
        todo!()
    }
}
