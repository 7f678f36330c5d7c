//! A call's deadline. It is suspended while the tool waits for a human (that
//! time is not the tool's) and pushed back by the wait when the last prompt
//! closes; once it passes, a short drain reads a reply already on its way
//! before the call counts as timed out.

use std::time::Duration;

use tokio::time::Instant;

pub(super) struct Deadline {
    at: Instant,
    /// Human prompts open now; the deadline runs only while there are none.
    humans: usize,
    paused_since: Instant,
    /// The deadline passed; `at` is now the end of the drain.
    draining: bool,
}

/// What a deadline that fired means.
pub(super) enum Fired {
    /// The call is over time: the worker is killed.
    Expired,
    /// The deadline passed just now: read what is already readable, until `at`.
    Draining,
}

impl Deadline {
    pub(super) fn new(at: Instant) -> Deadline {
        Deadline {
            at,
            humans: 0,
            paused_since: at,
            draining: false,
        }
    }

    /// When the timer fires (meaningful while [`Deadline::is_running`]).
    pub(super) fn at(&self) -> Instant {
        self.at
    }

    /// False while a human is being asked.
    pub(super) fn is_running(&self) -> bool {
        self.humans == 0
    }

    /// The timer fired: the first time the drain window of `drain` starts,
    /// the second time the call is over time.
    pub(super) fn fire(&mut self, drain: Duration) -> Fired {
        if self.draining {
            return Fired::Expired;
        }
        self.draining = true;
        self.at = Instant::now() + drain;
        Fired::Draining
    }

    /// A human prompt opened; true when it is the first (the timer stops now).
    pub(super) fn pause(&mut self) -> bool {
        self.humans += 1;
        if self.humans == 1 {
            self.paused_since = Instant::now();
            return true;
        }
        false
    }

    /// A human prompt closed; true when it was the last (the timer runs
    /// again, pushed back by the time the prompts were open).
    pub(super) fn resume(&mut self) -> bool {
        if self.humans == 0 {
            return false;
        }
        self.humans -= 1;
        if self.humans == 0 {
            self.at += self.paused_since.elapsed();
            return true;
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_wait_for_a_human_pushes_the_deadline_back() {
        let start = Instant::now();
        let mut deadline = Deadline::new(start + Duration::from_secs(1));
        assert!(deadline.pause());
        assert!(
            !deadline.pause(),
            "the second prompt does not stop it again"
        );
        assert!(!deadline.is_running());
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!deadline.resume(), "one prompt is still open");
        assert!(deadline.resume());
        assert!(deadline.is_running());
        // Pushed back by at least the time the prompts were open.
        let pushed = deadline.at() - (start + Duration::from_secs(1));
        assert!(pushed >= Duration::from_millis(50), "{pushed:?}");
        assert!(!deadline.resume(), "no prompt is open");
        assert_eq!(deadline.at(), start + Duration::from_secs(1) + pushed);
    }

    #[tokio::test]
    async fn a_deadline_drains_once_then_expires() {
        let start = Instant::now();
        let mut deadline = Deadline::new(start);
        assert!(matches!(
            deadline.fire(Duration::from_millis(5)),
            Fired::Draining
        ));
        assert!(deadline.at() >= start + Duration::from_millis(5));
        assert!(matches!(
            deadline.fire(Duration::from_millis(5)),
            Fired::Expired
        ));
    }
}
