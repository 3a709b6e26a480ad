//! Waiting for many requests at once (`wait_all`, `wait_any`), for the
//! Rust handles (`request.rs`) and the C ABI's plain handles (`raw.rs`)
//! alike. Requests may belong to different workers (`thread.rs`): each is
//! looked up under its own worker's lock, and a wait progresses the worker
//! of what it waits for, the others now and then (`Inner::progress_others`).

use crate::backoff::Backoff;
use crate::error::Result;
use crate::inner::Inner;
use crate::raw::REQUEST_COMPLETE;
use crate::status::Status;
use crate::table::worker_of;

impl Inner {
    /// Wait for every handle of `0..n`. `req(i, None)` gives handle `i` (0:
    /// done already, not reported; `REQUEST_COMPLETE`: reported with an
    /// empty status); `req(i, Some(status))` reports it complete.
    ///
    /// One pass: a cursor moves over the requests in order and only the
    /// one under it is checked after each progress call of its worker (the
    /// others complete meanwhile and are then passed in one step each), so
    /// the cost is O(requests + polls), with no allocation.
    pub(crate) fn wait_all_ids(
        &self,
        n: usize,
        mut req: impl FnMut(usize, Option<Status>) -> u64,
    ) -> Result<()> {
        let mut backoff = Backoff::new(self.yields);
        let mut next = 0;
        let mut idle = 0;
        loop {
            let w = (next..n)
                .map(|i| req(i, None))
                .find(|&id| id != 0 && id != REQUEST_COMPLETE)
                .map_or(0, worker_of);
            let mut moved = false;
            {
                let mut core = self.lock_on(w)?;
                loop {
                    while next < n {
                        match req(next, None) {
                            0 => {}
                            REQUEST_COMPLETE => _ = req(next, Some(Status::default())),
                            id if worker_of(id) != w => break,
                            id => match Inner::take_if_complete(&mut core, id) {
                                Some(status) => _ = req(next, Some(status)),
                                None => break,
                            },
                        }
                        next += 1;
                    }
                    if next == n {
                        return Ok(());
                    }
                    if worker_of(req(next, None)) != w {
                        // The cursor reached another worker's request.
                        moved = true;
                        break;
                    }
                    if !Inner::poll_a_while(&mut core, &backoff) {
                        break;
                    }
                    backoff.busy();
                }
                Inner::check(&core)?;
            }
            if !moved {
                self.progress_others(w, &mut idle)?;
                self.idle_turn(w, &mut backoff);
            }
        }
    }

    /// Wait until one handle of `0..n` (as in `wait_all_ids`) completes:
    /// its index and status; `None` if every handle is 0.
    ///
    /// When all live handles are one worker's, they are scanned once, then
    /// again only after a progress call completed something (the worker
    /// counts completions), and nothing is allocated. Handles of several
    /// workers are scanned after each round of progress over their
    /// workers.
    pub(crate) fn wait_any_ids(
        &self,
        n: usize,
        mut req: impl FnMut(usize, Option<Status>) -> u64,
    ) -> Result<Option<(usize, Status)>> {
        let mut live = (0..n).map(|i| (i, req(i, None))).filter(|&(_, id)| id != 0);
        let Some((_, first)) = live.next() else {
            return Ok(None);
        };
        if let Some(i) = (0..n).find(|&i| req(i, None) == REQUEST_COMPLETE) {
            return Ok(Some((i, Status::default())));
        }
        let w = worker_of(first);
        let one_worker = (0..n)
            .map(|i| req(i, None))
            .all(|id| id == 0 || worker_of(id) == w);
        if !one_worker {
            return self.wait_any_mixed(n, req);
        }
        let mut backoff = Backoff::new(self.yields);
        let mut seen = None;
        let mut idle = 0;
        loop {
            {
                let mut core = self.lock_on(w)?;
                loop {
                    let now = core.st.completions();
                    if seen != Some(now) {
                        seen = Some(now);
                        for i in 0..n {
                            let id = req(i, None);
                            if id != 0 {
                                if let Some(status) = Inner::take_if_complete(&mut core, id) {
                                    req(i, Some(status));
                                    return Ok(Some((i, status)));
                                }
                            }
                        }
                    }
                    if !Inner::poll_a_while(&mut core, &backoff) {
                        break;
                    }
                    backoff.busy();
                }
                Inner::check(&core)?;
            }
            self.progress_others(w, &mut idle)?;
            self.idle_turn(w, &mut backoff);
        }
    }

    #[cold]
    fn wait_any_mixed(
        &self,
        n: usize,
        mut req: impl FnMut(usize, Option<Status>) -> u64,
    ) -> Result<Option<(usize, Status)>> {
        let mut backoff = Backoff::new(self.yields);
        loop {
            let mut events = 0;
            for w in 0..self.workers() {
                let mut core = self.lock_on(w)?;
                for i in 0..n {
                    let id = req(i, None);
                    if id != 0 && worker_of(id) == w {
                        if let Some(status) = Inner::take_if_complete(&mut core, id) {
                            req(i, Some(status));
                            return Ok(Some((i, status)));
                        }
                    }
                }
                events += core.progress();
                Inner::check(&core)?;
            }
            if events == 0 {
                backoff.idle();
            } else {
                backoff.busy();
            }
        }
    }
}
