//! A call's deadline. It is suspended while the tool waits for a human (that
//! time is not the tool's) — but only once every process of the tool is
//! known to be stopped (`frozen`): a prompt whose tool could not be frozen
//! leaves the timer running — and pushed back by the wait when the last
//! prompt closes; once it passes, a short drain reads a reply already on its
//! way before the call counts as timed out.

use std::time::Duration;

use tokio::time::Instant;

pub(super) struct Deadline {
    at: Instant,
    /// Human prompts open now.
    humans: usize,
    /// Since when the timer has been stopped: the tool was frozen while a
    /// prompt was open. `None`: the timer runs.
    paused_since: Option<Instant>,
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
            paused_since: None,
            draining: false,
        }
    }

    /// When the timer fires (meaningful while [`Deadline::is_running`]).
    pub(super) fn at(&self) -> Instant {
        self.at
    }

    /// False while a human is being asked and the tool is frozen.
    pub(super) fn is_running(&self) -> bool {
        self.paused_since.is_none()
    }

    /// Whether a human prompt is open.
    pub(super) fn prompts_open(&self) -> bool {
        self.humans > 0
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

    /// A human prompt opened; true when it is the first: the caller
    /// freezes the tool's processes, then says so with [`Deadline::frozen`].
    pub(super) fn prompt_opened(&mut self) -> bool {
        self.humans += 1;
        self.humans == 1
    }

    /// Every process of the tool is stopped (the kernel says so): the timer
    /// stops now, if a prompt is still open.
    pub(super) fn frozen(&mut self) {
        if self.humans > 0 && self.paused_since.is_none() {
            self.paused_since = Some(Instant::now());
        }
    }

    /// A human prompt closed; true when it was the last: the caller lets the
    /// tool run again, and the timer runs again, pushed back by the time it
    /// was stopped.
    pub(super) fn prompt_closed(&mut self) -> bool {
        if self.humans == 0 {
            return false;
        }
        self.humans -= 1;
        if self.humans > 0 {
            return false;
        }
        if let Some(since) = self.paused_since.take() {
            self.at += since.elapsed();
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_wait_for_a_human_pushes_the_deadline_back() {
        let start = Instant::now();
        let mut deadline = Deadline::new(start + Duration::from_secs(1));
        assert!(deadline.prompt_opened());
        assert!(deadline.is_running(), "not before the tool is frozen");
        deadline.frozen();
        assert!(
            !deadline.prompt_opened(),
            "the second prompt does not freeze it again"
        );
        assert!(!deadline.is_running());
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!deadline.prompt_closed(), "one prompt is still open");
        assert!(deadline.prompt_closed());
        assert!(deadline.is_running());
        // Pushed back by at least the time the prompts were open.
        let pushed = deadline.at() - (start + Duration::from_secs(1));
        assert!(pushed >= Duration::from_millis(50), "{pushed:?}");
        assert!(!deadline.prompt_closed(), "no prompt is open");
        assert_eq!(deadline.at(), start + Duration::from_secs(1) + pushed);
    }

    #[tokio::test]
    async fn a_tool_that_could_not_be_frozen_keeps_its_timer_running() {
        let start = Instant::now();
        let mut deadline = Deadline::new(start + Duration::from_secs(1));
        assert!(deadline.prompt_opened());
        // No `frozen`: the freeze did not settle.
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(deadline.is_running());
        assert!(deadline.prompt_closed());
        assert_eq!(
            deadline.at(),
            start + Duration::from_secs(1),
            "not pushed back"
        );
    }

    /// Every order of prompts opening, freezes succeeding or not, and
    /// prompts closing, up to six events: the timer is stopped exactly
    /// while a prompt is open and the first prompt's freeze succeeded, and
    /// it is pushed back by nothing else.
    #[test]
    fn the_timer_stops_only_while_a_frozen_prompt_is_open() {
        #[derive(Clone, Copy, Debug)]
        enum Event {
            Open { freezes: bool },
            Close,
        }
        const EVENTS: [Event; 3] = [
            Event::Open { freezes: true },
            Event::Open { freezes: false },
            Event::Close,
        ];
        fn run(events: &[Event]) {
            let at = Instant::now() + Duration::from_secs(3600);
            let mut deadline = Deadline::new(at);
            let (mut open, mut frozen) = (0usize, false);
            for event in events {
                match *event {
                    Event::Open { freezes } => {
                        let first = deadline.prompt_opened();
                        assert_eq!(first, open == 0, "{events:?}");
                        open += 1;
                        if first && freezes {
                            deadline.frozen();
                            frozen = true;
                        }
                    }
                    Event::Close => {
                        let last = deadline.prompt_closed();
                        assert_eq!(last, open == 1, "{events:?}");
                        open = open.saturating_sub(1);
                        if open == 0 {
                            frozen = false;
                        }
                    }
                }
                assert_eq!(deadline.is_running(), !frozen, "{events:?}");
                assert_eq!(deadline.prompts_open(), open > 0, "{events:?}");
                if deadline.is_running() && !deadline.prompts_open() {
                    assert!(deadline.at() >= at, "{events:?}");
                }
            }
        }
        let mut sequences: Vec<Vec<Event>> = vec![vec![]];
        for _ in 0..6 {
            sequences = sequences
                .into_iter()
                .flat_map(|s| {
                    EVENTS.iter().map(move |e| {
                        let mut next = s.clone();
                        next.push(*e);
                        next
                    })
                })
                .collect();
            for sequence in &sequences {
                run(sequence);
            }
        }
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
