//! A call's deadline. It is suspended while the tool waits for a human (that
//! time is not the tool's) — but only once every process of the tool is
//! known to be stopped (`frozen`): a prompt whose tool could not be frozen
//! leaves the timer running — and pushed back by the wait when the last
//! prompt closes; once it passes, a short drain reads a reply already on its
//! way before the call counts as timed out. With a grace, the tool is then
//! asked to clean up, and the hard end comes `grace` after the deadline:
//! nothing stops or moves the timer from then on, a human prompt included.

use std::time::Duration;

use tokio::time::Instant;

pub(super) struct Deadline {
    at: Instant,
    /// Human prompts open now.
    humans: usize,
    /// Since when the timer has been stopped: the tool was frozen while a
    /// prompt was open. `None`: the timer runs.
    paused_since: Option<Instant>,
    phase: Phase,
    /// How long the tool may clean up after its deadline (zero: none).
    grace: Duration,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Before the deadline.
    Running,
    /// The deadline passed at `passed`; `at` is the end of the drain.
    Draining { passed: Instant },
    /// The tool was asked to clean up at `asked`; `at` is the deadline
    /// plus the grace.
    Grace { asked: Instant },
}

/// What a deadline that fired means.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Fired {
    /// The call is over time: the worker is killed.
    Expired,
    /// The deadline passed just now: read what is already readable, until `at`.
    Draining,
    /// No reply came in the drain: the tool is asked to clean up, and has
    /// until `at`.
    Grace,
}

impl Deadline {
    pub(super) fn new(at: Instant, grace: Duration) -> Deadline {
        Deadline {
            at,
            humans: 0,
            paused_since: None,
            phase: Phase::Running,
            grace,
        }
    }

    /// When the tool was asked to clean up, if it was.
    pub(super) fn grace_asked(&self) -> Option<Instant> {
        match self.phase {
            Phase::Grace { asked } => Some(asked),
            _ => None,
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

    /// The timer fired: the first time the drain window of `drain` starts;
    /// the second time the tool's grace starts, if it has one, ending
    /// `grace` after the deadline passed; after that the call is over time.
    pub(super) fn fire(&mut self, drain: Duration) -> Fired {
        match self.phase {
            Phase::Running => {
                let passed = Instant::now();
                self.phase = Phase::Draining { passed };
                self.at = passed + drain;
                Fired::Draining
            }
            Phase::Draining { passed } if !self.grace.is_zero() => {
                self.phase = Phase::Grace {
                    asked: Instant::now(),
                };
                self.at = self.at.max(passed + self.grace);
                Fired::Grace
            }
            Phase::Draining { .. } | Phase::Grace { .. } => Fired::Expired,
        }
    }

    /// A human prompt opened; true when it is the first and the deadline
    /// has not passed: the caller freezes the tool's processes, then says
    /// so with [`Deadline::frozen`].
    pub(super) fn prompt_opened(&mut self) -> bool {
        self.humans += 1;
        self.humans == 1 && self.phase == Phase::Running
    }

    /// Every process of the tool is stopped (the kernel says so): the timer
    /// stops now, if a prompt is still open and the deadline has not passed.
    pub(super) fn frozen(&mut self) {
        if self.humans > 0 && self.paused_since.is_none() && self.phase == Phase::Running {
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
        let mut deadline = Deadline::new(start + Duration::from_secs(1), Duration::ZERO);
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
        let mut deadline = Deadline::new(start + Duration::from_secs(1), Duration::ZERO);
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
            let mut deadline = Deadline::new(at, Duration::ZERO);
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
        every_sequence(&EVENTS, 6, run);
    }

    /// Every order of the timer firing and prompts opening (frozen or
    /// not) and closing, up to seven events, with a grace: the grace comes
    /// once, after the drain; from the deadline on nothing stops the timer
    /// or moves its end past the deadline plus the grace; and the call
    /// expires only at the grace's end.
    #[test]
    fn nothing_moves_the_hard_end_once_the_deadline_has_passed() {
        #[derive(Clone, Copy, Debug)]
        enum Event {
            Fire,
            Open { freezes: bool },
            Close,
        }
        const EVENTS: [Event; 4] = [
            Event::Fire,
            Event::Open { freezes: true },
            Event::Open { freezes: false },
            Event::Close,
        ];
        let drain = Duration::from_millis(5);
        let grace = Duration::from_secs(2);
        let run = |events: &[Event]| {
            let mut deadline = Deadline::new(Instant::now() + Duration::from_secs(3600), grace);
            let (mut passed, mut graced, mut expired) = (None::<Instant>, false, false);
            for event in events {
                match *event {
                    // The timer fires only when it runs (the exchange's select).
                    Event::Fire if deadline.is_running() && !expired => {
                        let before = Instant::now();
                        match deadline.fire(drain) {
                            Fired::Draining => {
                                assert!(passed.is_none(), "{events:?}");
                                passed = Some(before);
                            }
                            Fired::Grace => {
                                assert!(passed.is_some() && !graced, "{events:?}");
                                graced = true;
                                assert!(deadline.grace_asked().is_some());
                            }
                            Fired::Expired => {
                                assert!(graced, "expired before its grace: {events:?}");
                                expired = true;
                            }
                        }
                    }
                    Event::Fire => {}
                    Event::Open { freezes } => {
                        if deadline.prompt_opened() && freezes {
                            deadline.frozen();
                        }
                    }
                    Event::Close => {
                        deadline.prompt_closed();
                    }
                }
                if let Some(passed) = passed {
                    assert!(
                        deadline.is_running(),
                        "stopped after the deadline: {events:?}"
                    );
                    let hard_end = passed + grace + Duration::from_millis(50);
                    assert!(
                        deadline.at() <= hard_end,
                        "moved past the hard end: {events:?}"
                    );
                }
            }
        };
        every_sequence(&EVENTS, 7, run);
    }

    /// `run` on every sequence of `events` of 1 to `longest` events.
    fn every_sequence<E: Copy>(events: &[E], longest: usize, run: impl Fn(&[E])) {
        let mut sequences: Vec<Vec<E>> = vec![vec![]];
        for _ in 0..longest {
            sequences = sequences
                .into_iter()
                .flat_map(|s| {
                    events.iter().map(move |e| {
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
        let mut deadline = Deadline::new(start, Duration::ZERO);
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
