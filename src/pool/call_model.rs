//! Model-based test of a call's life: random interleavings of arrivals,
//! replies, deadlines, deaths (before and after the worker read the
//! request), cancels, reloads and shutdown over several workers and
//! sessions, driven through the real state machines ([`CallState`],
//! [`RequestState`], [`Placement`], [`worker_after`], [`Parked`]) and the
//! pool's dispatch rule (the first call in line takes the first idle worker
//! it may run on). After every step it checks what the pool promises.

use std::collections::VecDeque;

use proptest::prelude::*;

use super::call::{worker_after, AttemptEnd, CallNext, CallState, Placement, WorkerAfter};
use super::parking::Parked;
use crate::worker::request::{Action, RequestState};

const LEN: usize = 16;

#[derive(Debug, Clone)]
enum Event {
    Arrive {
        session: u8,
    },
    Reply {
        worker: u8,
    },
    /// The call's deadline; `grace`: the call has one (its tool is asked
    /// to clean up, and a later reply or deadline ends it).
    Deadline {
        worker: u8,
        grace: bool,
    },
    /// The worker dies; `read`: after it read the request.
    Die {
        worker: u8,
        read: bool,
    },
    Cancel {
        call: u8,
    },
    /// A parked worker dies (it is not replaced: it was beyond the size).
    DieParked,
    Reload,
    Shutdown,
}

fn event() -> impl Strategy<Value = Event> {
    prop_oneof![
        4 => (0u8..3).prop_map(|session| Event::Arrive { session }),
        4 => (0u8..3).prop_map(|worker| Event::Reply { worker }),
        1 => (0u8..3, any::<bool>()).prop_map(|(worker, grace)| Event::Deadline { worker, grace }),
        2 => (0u8..3, any::<bool>()).prop_map(|(worker, read)| Event::Die { worker, read }),
        1 => (0u8..16).prop_map(|call| Event::Cancel { call }),
        1 => Just(Event::DieParked),
        1 => Just(Event::Reload),
        1 => Just(Event::Shutdown),
    ]
}

struct Running {
    call: usize,
    request: RequestState,
}

struct ModelWorker {
    served: Option<String>,
    calls: u64,
    generation: u64,
    running: Option<Running>,
}

struct Call {
    session: String,
    state: CallState,
    executed: u32,
    answers: u32,
}

struct Model {
    placement: Placement,
    max_calls: Option<u64>,
    generation: u64,
    closed: bool,
    workers: Vec<Option<ModelWorker>>,
    parked: Parked<ModelWorker>,
    park_limit: usize,
    line: VecDeque<usize>,
    calls: Vec<Call>,
}

impl Model {
    fn fresh(&self) -> ModelWorker {
        ModelWorker {
            served: None,
            calls: 0,
            generation: self.generation,
            running: None,
        }
    }

    fn answer(&mut self, call: usize) {
        self.calls[call].answers += 1;
    }

    /// The pool's dispatch: the first call in line takes the idle worker
    /// [`Placement::choose`] picks; under per-session placement one of
    /// another session's is parked, and one of the call's session parked
    /// earlier takes its place, else a fresh one.
    fn dispatch(&mut self) {
        if self.closed {
            return;
        }
        let mut index = 0;
        while index < self.line.len() {
            let call = self.line[index];
            let session = self.calls[call].session.clone();
            let idle: Vec<usize> = (0..self.workers.len())
                .filter(|&w| {
                    self.workers[w]
                        .as_ref()
                        .is_some_and(|w| w.running.is_none())
                })
                .collect();
            if idle.is_empty() {
                return;
            }
            let served = idle
                .iter()
                .map(|&w| self.workers[w].as_ref().and_then(|w| w.served.as_deref()));
            let parked_here = self.parked.holds(&session);
            let w = idle[self.placement.choose(served.clone(), &session, parked_here)];
            let chosen = self.workers[w].as_ref().and_then(|w| w.served.clone());
            if !self.placement.admits(chosen.as_deref(), &session) {
                let another_could_run = idle.iter().any(|&i| {
                    let served = self.workers[i].as_ref().and_then(|w| w.served.as_deref());
                    self.placement.admits(served, &session)
                });
                // As `Shared::admits` under per-session placement: the
                // session's own is taken out first, then the displaced one
                // parked (those that no longer fit are retired).
                let resumed = match self.placement {
                    Placement::PerSession => self.parked.resume(&session),
                    _ => None,
                };
                if self.placement == Placement::PerSession {
                    if let (Some(displaced), Some(served)) = (self.workers[w].take(), chosen) {
                        drop(self.parked.park(served, displaced));
                    }
                }
                match resumed {
                    Some(own) => {
                        assert_eq!(own.served.as_deref(), Some(session.as_str()));
                        assert_eq!(own.generation, self.generation, "a stale worker resumed");
                        self.workers[w] = Some(own);
                    }
                    None => {
                        // Displaced only when no idle worker could have run it.
                        assert!(
                            self.placement == Placement::Sandboxed || !another_could_run,
                            "a worker of another session was displaced while one that could run {session} was idle"
                        );
                        // A fresh worker takes its place; the call stays first.
                        self.calls[call].state.got_worker().unwrap();
                        self.calls[call].state.refused_by_worker().unwrap();
                        self.workers[w] = Some(self.fresh());
                        continue;
                    }
                }
            }
            let worker = self.workers[w].as_mut().expect("idle");
            self.line.remove(index);
            worker.served = Some(session);
            self.calls[call].state.got_worker().unwrap();
            let mut request = RequestState::start(LEN, Some(0)).unwrap();
            request.wrote(LEN);
            worker.running = Some(Running { call, request });
            index = 0;
        }
    }

    /// The attempt on worker `w` ended; `ended`: whether it ended the worker.
    fn attempt_ended(&mut self, w: usize, end: AttemptEnd, ended: bool) {
        let Some(worker) = self.workers[w].as_mut() else {
            return;
        };
        let Some(Running { call, .. }) = worker.running.take() else {
            return;
        };
        worker.calls += 1;
        let stale = worker.generation < self.generation;
        let termination = ended.then_some(crate::outcome::Termination::TimedOut);
        match worker_after(
            termination,
            worker.calls,
            self.max_calls,
            stale,
            self.closed,
        ) {
            WorkerAfter::Idle => {}
            WorkerAfter::Retire(_) | WorkerAfter::Replace(_) => {
                self.workers[w] = (!self.closed).then(|| self.fresh());
            }
        }
        if self.calls[call].state == CallState::Answered {
            return; // cancelled meanwhile: its caller has its answer
        }
        match self.calls[call].state.attempt_ended(&end).unwrap() {
            CallNext::Answer | CallNext::FailBrokenTwice => self.answer(call),
            // A closed pool's checkout fails at once (PoolClosed).
            CallNext::CheckOutAgain if self.closed => {
                self.calls[call].state.abandoned();
                self.answer(call);
            }
            CallNext::CheckOutAgain => self.line.push_back(call),
        }
    }

    fn step(&mut self, event: Event) {
        let worker = |w: u8, model: &Model| usize::from(w) % model.workers.len();
        match event {
            Event::Arrive { session } => {
                let call = self.calls.len();
                self.calls.push(Call {
                    session: format!("s{session}"),
                    state: CallState::new(),
                    executed: 0,
                    answers: 0,
                });
                if self.closed {
                    self.calls[call].state.abandoned();
                    self.answer(call);
                } else {
                    self.line.push_back(call);
                }
            }
            Event::Reply { worker: w } => {
                let w = worker(w, self);
                let Some(running) = self.workers[w].as_mut().and_then(|w| w.running.as_mut())
                else {
                    return;
                };
                let in_grace = matches!(running.request, RequestState::Grace { .. });
                let action = running.request.reply();
                let call = running.call;
                self.calls[call].executed += 1;
                if in_grace {
                    // The clean-up's end: the call timed out, its worker goes.
                    assert_eq!(action, Ok(Action::Kill));
                    self.attempt_ended(w, AttemptEnd::Ran, true);
                } else {
                    assert_eq!(action, Ok(Action::Deliver));
                    self.attempt_ended(w, AttemptEnd::Ran, false);
                }
            }
            Event::Deadline { worker: w, grace } => {
                let w = worker(w, self);
                let Some(running) = self.workers[w].as_mut().and_then(|w| w.running.as_mut())
                else {
                    return;
                };
                let first = matches!(running.request, RequestState::Sent { .. });
                let call = running.call;
                match running.request.timed_out(grace) {
                    // Cleaning up: the call is still in flight, on its worker.
                    Action::AskToCleanUp => assert!(grace && first),
                    action => {
                        assert_eq!(action, Action::DumpAndKill);
                        self.calls[call].executed += 1;
                        self.attempt_ended(w, AttemptEnd::Ran, true);
                    }
                }
            }
            Event::Die { worker: w, read } => {
                let w = worker(w, self);
                let Some(slot) = self.workers[w].as_mut() else {
                    return;
                };
                let Some(running) = slot.running.as_mut() else {
                    // Died idle: replaced before any call picks it.
                    self.workers[w] = (!self.closed).then(|| self.fresh());
                    return;
                };
                let call = running.call;
                let unread = if read { 0 } else { LEN };
                let end = match running.request.lost(Some(unread)) {
                    Action::MoveElsewhere => AttemptEnd::NeverStarted,
                    _ => AttemptEnd::Ran,
                };
                if read {
                    self.calls[call].executed += 1;
                }
                self.attempt_ended(w, end, true);
            }
            Event::Cancel { call } => {
                let call = usize::from(call);
                if call >= self.calls.len() || self.calls[call].state == CallState::Answered {
                    return;
                }
                self.calls[call].state.abandoned();
                self.answer(call);
                self.line.retain(|&c| c != call);
                // Its worker, if it runs there, is killed and replaced.
                for w in 0..self.workers.len() {
                    let runs = self.workers[w]
                        .as_ref()
                        .and_then(|w| w.running.as_ref())
                        .is_some_and(|r| r.call == call);
                    if runs {
                        if let Some(running) =
                            self.workers[w].as_mut().and_then(|w| w.running.as_mut())
                        {
                            assert_eq!(running.request.abandoned(), Action::Kill);
                        }
                        // It may have run: counted as such.
                        self.calls[call].executed += 1;
                        self.workers[w] = (!self.closed).then(|| self.fresh());
                    }
                }
            }
            Event::DieParked => {
                drop(self.parked.take_where(|_| true));
            }
            Event::Reload => {
                self.generation += 1;
                // Every parked worker is retired at once.
                drop(self.parked.take_all());
                for w in 0..self.workers.len() {
                    let idle = self.workers[w]
                        .as_ref()
                        .is_some_and(|w| w.running.is_none());
                    if idle {
                        self.workers[w] = Some(self.fresh());
                    }
                }
            }
            Event::Shutdown => {
                self.closed = true;
                drop(self.parked.take_all());
                for call in std::mem::take(&mut self.line) {
                    self.calls[call].state.abandoned();
                    self.answer(call);
                }
            }
        }
        self.dispatch();
        self.check();
    }

    fn check(&self) {
        for (index, call) in self.calls.iter().enumerate() {
            assert!(
                call.answers <= 1,
                "call {index} answered {} times",
                call.answers
            );
            assert!(
                call.executed <= 1,
                "call {index} ran {} times",
                call.executed
            );
            assert_eq!(
                call.answers == 1,
                call.state == CallState::Answered,
                "call {index}: answered exactly when its state says so"
            );
        }
        for w in self.workers.iter().flatten() {
            if let Some(running) = &w.running {
                let session = &self.calls[running.call].session;
                assert!(
                    self.placement.admits(w.served.as_deref(), session),
                    "a worker of {:?} runs a call of {session}",
                    w.served
                );
            }
        }
        assert!(
            self.parked.len() <= self.park_limit,
            "more parked than the limit"
        );
        if !self.closed && !self.line.is_empty() {
            let idle = self
                .workers
                .iter()
                .flatten()
                .filter(|w| w.running.is_none())
                .count();
            assert_eq!(idle, 0, "a call waits while a worker is idle");
        }
    }

    /// Every call still in flight ends (its worker answers): each is
    /// answered exactly once in the end.
    fn finish(&mut self) {
        for _ in 0..self.calls.len() * 4 + 8 {
            for w in 0..self.workers.len() {
                self.step(Event::Reply { worker: w as u8 });
            }
        }
        for (index, call) in self.calls.iter().enumerate() {
            assert_eq!(call.answers, 1, "call {index} was not answered");
        }
    }
}

proptest! {
    // 3 000 schedules in the test command; PROPTEST_CASES asks for more.
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|n| n.parse().ok()).unwrap_or(3000),
        ..ProptestConfig::default()
    })]

    #[test]
    fn every_call_is_answered_once_and_runs_at_most_once(
        events in proptest::collection::vec(event(), 1..60),
        workers in 1usize..4,
        placement in prop_oneof![
            Just(Placement::Shared),
            Just(Placement::PerSession),
            Just(Placement::Sandboxed)
        ],
        max_calls in proptest::option::of(1u64..4),
        park_limit in 0usize..3,
    ) {
        let mut model = Model {
            placement,
            max_calls,
            generation: 0,
            closed: false,
            workers: Vec::new(),
            parked: Parked::new(park_limit),
            park_limit,
            line: VecDeque::new(),
            calls: Vec::new(),
        };
        model.workers = (0..workers).map(|_| Some(model.fresh())).collect();
        for event in events {
            model.step(event);
        }
        model.finish();
    }
}
