//! Workers kept for their sessions (`--session-isolation process`).
//!
//! Under per-session placement a worker serves one session. When a call of
//! another session needs the pool's slot, the worker is parked rather than
//! recycled: it stays started, idle and still its session's, beyond the
//! pool's size, so that the session's next call resumes it instead of
//! paying for a new process. At most `limit` wait; past it the one parked
//! longest ago is retired. Parked workers never run a call while parked:
//! a call first takes one back into a slot (the worker it displaces is
//! parked in its place), so no more than the pool's size run at once.
//!
//! Generic over the worker so that the call model (`call_model`) drives
//! this very structure.

use std::collections::VecDeque;

/// Parked workers, the one parked longest ago first, each with its session.
#[derive(Debug)]
pub(crate) struct Parked<W> {
    limit: usize,
    waiting: VecDeque<(String, W)>,
}

impl<W> Parked<W> {
    pub(crate) fn new(limit: usize) -> Parked<W> {
        Parked {
            limit,
            waiting: VecDeque::new(),
        }
    }

    /// Parks `worker` for `session`; gives back the workers that no longer
    /// fit (the longest parked first; `worker` itself with a limit of 0),
    /// for the caller to retire.
    pub(crate) fn park(&mut self, session: String, worker: W) -> Vec<W> {
        self.waiting.push_back((session, worker));
        let over = self.waiting.len().saturating_sub(self.limit);
        self.waiting.drain(..over).map(|(_, w)| w).collect()
    }

    /// The worker of `session` parked last, taken out.
    pub(crate) fn resume(&mut self, session: &str) -> Option<W> {
        let index = self.waiting.iter().rposition(|(s, _)| s == session)?;
        self.waiting.remove(index).map(|(_, w)| w)
    }

    /// Whether a worker of `session` is parked.
    pub(crate) fn holds(&self, session: &str) -> bool {
        self.waiting.iter().any(|(s, _)| s == session)
    }

    /// The first parked worker `found` picks, taken out.
    pub(crate) fn take_where(&mut self, found: impl Fn(&W) -> bool) -> Option<W> {
        let index = self.waiting.iter().position(|(_, w)| found(w))?;
        self.waiting.remove(index).map(|(_, w)| w)
    }

    /// Every parked worker, taken out.
    pub(crate) fn take_all(&mut self) -> Vec<W> {
        self.waiting.drain(..).map(|(_, w)| w).collect()
    }

    pub(crate) fn len(&self) -> usize {
        self.waiting.len()
    }

    /// How many workers may be parked at once.
    pub(crate) fn limit(&self) -> usize {
        self.limit
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_resumes_its_own_worker_and_the_longest_parked_leave_first() {
        let mut parked = Parked::new(2);
        assert!(parked.park("a".into(), 1).is_empty());
        assert!(parked.park("b".into(), 2).is_empty());
        assert!(parked.holds("a") && !parked.holds("c"));
        // A third does not fit: the one parked longest ago (a's) leaves.
        assert_eq!(parked.park("c".into(), 3), vec![1]);
        assert_eq!(parked.resume("a"), None);
        assert_eq!(parked.resume("c"), Some(3));
        assert_eq!(parked.len(), 1);
        assert_eq!(parked.take_where(|w| *w == 2), Some(2));
        assert_eq!(parked.len(), 0);
    }

    #[test]
    fn with_no_room_a_worker_is_given_straight_back() {
        let mut parked = Parked::new(0);
        assert_eq!(parked.park("a".into(), 7), vec![7]);
        assert!(!parked.holds("a"));
    }

    #[test]
    fn the_worker_parked_last_is_resumed_first() {
        let mut parked = Parked::new(4);
        parked.park("a".into(), 1);
        parked.park("a".into(), 2);
        assert_eq!(parked.resume("a"), Some(2));
        assert_eq!(parked.take_all(), vec![1]);
    }
}
