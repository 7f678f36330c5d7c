//! One request's exchange with a worker, run by its actor: the request
//! written, its callbacks served, its reply read, its deadline kept (paused
//! while a human is asked), the worker killed if its caller gives up, and
//! what the call left running checked. Every decision about the request
//! itself is a transition of its [`RequestState`].

use std::collections::HashMap;

use serde_json::Value;
use tokio::io::AsyncWriteExt;
use tokio::net::unix::pipe;
use tokio::task::JoinSet;
use tokio::time::{timeout, timeout_at, Instant};

use super::actor::{Actor, JobParts};
use super::deadline::{Deadline, Fired};
use super::request::{unread_in_pipe, Action, RequestState};
use super::{
    CallOutcome, CallbackError, Grace, Termination, DEADLINE_DRAIN, HANGUP_EXIT_WAIT,
    MAX_OPEN_CALLBACKS,
};
use crate::protocol::{
    encode_frame, next_message, write_frame, CallbackReply, Message, ProtocolError, RemoteError,
    ReplyValue,
};

impl Actor {
    /// Runs request `id` (`frame`, of which `state` says what is written)
    /// to its end; `None` when its caller gave up (`job`'s answer channel
    /// closed) and the worker was killed. Its deadline runs from `written_at`.
    pub(super) async fn run(
        &mut self,
        id: u64,
        frame: &[u8],
        state: &mut RequestState,
        stdin: &mut pipe::Sender,
        written_at: Instant,
        job: &mut JobParts,
    ) -> Option<CallOutcome> {
        let call = format!("{}#{id}", job.label);
        let exchange = self
            .exchange(id, frame, state, stdin, written_at, job)
            .await;
        let previous = self.last_call.replace(call);
        Some(match exchange {
            Exchange::Reply(result) => {
                let left_running = match self.leftovers.as_mut() {
                    Some(leftovers) => leftovers.after_reply().await,
                    None => None,
                };
                if let Some(left) = &left_running {
                    // Nothing it left may reach another call: the worker goes now.
                    tracing::info!(
                        worker = self.pid(),
                        "{} left {} after it answered: killing its worker",
                        job.label,
                        left.what
                    );
                    self.kill_now();
                } else {
                    // Before the next request is named: what this call
                    // printed is logged as its own.
                    self.stderr.end_call().await;
                }
                CallOutcome::Reply {
                    result,
                    left_running,
                }
            }
            Exchange::Abandoned => {
                state.abandoned();
                // A call in flight leaves the worker in an unknown state.
                self.kill_now();
                return None;
            }
            Exchange::Timeout { after_grace } => {
                state.timed_out(false);
                let stuck_at = self.stack_dump().await;
                // Every process of the call dies now (the worker by pidfd,
                // its group, and in a PID namespace everything in it); the
                // guardian's clean-up and its reaping are finished by
                // `kill`, which the pool awaits before it shuts down.
                self.kill_now();
                let grace = match after_grace {
                    true => Grace::RanOut,
                    false => Grace::None,
                };
                CallOutcome::TimedOut { stuck_at, grace }
            }
            Exchange::CleanedUp { took } => {
                // Whatever the tool answered, it answered late: the worker
                // (its whole tree) goes, as after any timeout.
                self.kill_now();
                CallOutcome::TimedOut {
                    stuck_at: None,
                    grace: Grace::CleanedUp(took),
                }
            }
            Exchange::Broken(e) => {
                // Every process of the worker is dead once this returns:
                // only then does the pipe's count say what was never read.
                let termination = self.end_broken(e).await;
                match state.lost(unread_in_pipe(stdin)) {
                    Action::MoveElsewhere => {
                        let after = previous.as_deref().unwrap_or("its start");
                        tracing::warn!(
                            worker = self.pid(),
                            "the worker was found broken after {after}, before it read {}: it {termination}",
                            job.label
                        );
                        CallOutcome::NotStarted(termination)
                    }
                    _ => CallOutcome::Died(termination),
                }
            }
        })
    }

    /// Ends a worker whose channel failed with `e`, and says how it ended.
    async fn end_broken(&mut self, e: ProtocolError) -> Termination {
        match e {
            // A worker that died leaves a guardian that exits at once with
            // its status; one still running closed its channel by itself.
            ProtocolError::Closed | ProtocolError::Io(_) => {
                match self.exited_within(HANGUP_EXIT_WAIT).await {
                    Some(status) => Termination::from_status(Some(status)),
                    None => {
                        self.kill().await;
                        Termination::HungUp
                    }
                }
            }
            e => {
                self.kill().await;
                Termination::BrokeProtocol {
                    error: e.to_string(),
                }
            }
        }
    }

    /// Writes the rest of the request and reads until its reply, serving
    /// the tool's callbacks meanwhile. Callbacks run as tasks of their own,
    /// concurrently with the read: a tool may wait for a human while another
    /// of its threads registers files, and a worker that dies while a prompt
    /// is open is noticed at once. While any callback waits for a human the
    /// deadline is suspended and the worker's processes are stopped; they
    /// resume, the deadline pushed back by the wait, before the answer is
    /// written.
    async fn exchange(
        &mut self,
        id: u64,
        frame: &[u8],
        state: &mut RequestState,
        stdin: &mut pipe::Sender,
        written_at: Instant,
        job: &mut JobParts,
    ) -> Exchange {
        // Dropped with the exchange (the call was cancelled): any callback
        // still running, a human prompt say, is aborted with it. Otherwise
        // they are over (aborted if need be) before the call returns.
        let mut pending = JoinSet::new();
        let mut deadline = Deadline::new(written_at + job.timeout, job.grace);
        let outcome = self
            .exchange_serving(id, frame, state, stdin, &mut deadline, job, &mut pending)
            .await;
        if !pending.is_empty() {
            pending.shutdown().await;
        }
        if deadline.prompts_open() {
            // Still frozen for a human when the call ended: let it go (it is
            // being killed, or it answered meanwhile).
            self.thaw();
        }
        outcome
    }

    #[allow(clippy::too_many_arguments)]
    async fn exchange_serving(
        &mut self,
        id: u64,
        frame: &[u8],
        state: &mut RequestState,
        stdin: &mut pipe::Sender,
        deadline: &mut Deadline,
        job: &mut JobParts,
        pending: &mut JoinSet<Result<Value, CallbackError>>,
    ) -> Exchange {
        if let Err(ended) = write_rest(frame, state, stdin, deadline).await {
            return ended;
        }
        // The worker's callback id, and whether it waits for a human, per task.
        let mut in_flight: HashMap<tokio::task::Id, (u64, bool)> = HashMap::new();
        loop {
            let event = tokio::select! {
                biased;
                message = next_message(&mut self.messages) => {
                    Event::Message(message)
                }
                Some(done) = pending.join_next_with_id(), if !pending.is_empty() => {
                    Event::Answered(done)
                }
                () = tokio::time::sleep_until(deadline.at()), if deadline.is_running() => {
                    Event::Deadline
                }
                () = job.end.closed() => Event::Abandoned,
                () = self.switch.pulled(), if self.may_kill() => Event::KillSwitch,
            };
            let (call_id, result) = match event {
                Event::Abandoned => return Exchange::Abandoned,
                Event::KillSwitch => {
                    // Killed where it stands (the pool's shutdown): the
                    // closed channel, read next, says how it ended.
                    self.kill_now();
                    self.killed = true;
                    continue;
                }
                Event::Deadline => match self.deadline_fired(state, deadline) {
                    Some(ended) => return ended,
                    None => continue,
                },
                Event::Message(Err(e)) => return Exchange::Broken(e),
                Event::Message(Ok(reply @ Message::Reply { id: got, .. })) if got == id => {
                    return replied(state, deadline, reply);
                }
                Event::Message(Ok(Message::Reply { id: got, .. })) => {
                    tracing::warn!(
                        worker = self.pid(),
                        id = got,
                        "dropping a reply whose request is not in flight"
                    );
                    continue;
                }
                Event::Message(Ok(Message::Hello { .. })) => {
                    return Exchange::Broken(ProtocolError::Unexpected("a second hello"));
                }
                Event::Message(Ok(Message::Importing { .. })) => {
                    return Exchange::Broken(ProtocolError::Unexpected(
                        "an import after the hello",
                    ));
                }
                Event::Message(Ok(Message::Call {
                    id: call_id,
                    method,
                    params,
                })) => {
                    let call = (call_id, method, params);
                    match self.start_callback(call, job, deadline, pending).await {
                        Started::Running(task, human) => {
                            in_flight.insert(task, (call_id, human));
                            continue;
                        }
                        Started::Refused(error) => (call_id, Err(error)),
                    }
                }
                Event::Answered(done) => match self.answered(done, &mut in_flight, deadline) {
                    Some(answer) => answer,
                    None => continue,
                },
            };
            if let Err(ended) = self.answer_callback(call_id, result, stdin, deadline).await {
                return ended;
            }
        }
    }

    /// A callback's task ended: its worker-side id and its answer (`None`
    /// for a task no longer in flight). The tool's processes run again
    /// before the answer to a human prompt is written, so the thread
    /// waiting for it can read it.
    fn answered(
        &mut self,
        done: Answered,
        in_flight: &mut HashMap<tokio::task::Id, (u64, bool)>,
        deadline: &mut Deadline,
    ) -> Option<(u64, Result<Value, CallbackError>)> {
        let (task, result) = match done {
            Ok((task, result)) => (task, result),
            Err(e) => (
                e.id(),
                Err(CallbackError::new(
                    "RuntimeError",
                    format!("the supervisor failed while serving the callback: {e}"),
                )),
            ),
        };
        let (call_id, human) = in_flight.remove(&task)?;
        if human && deadline.prompt_closed() {
            self.thaw();
        }
        Some((call_id, result))
    }

    /// The deadline's timer fired: `Some` ends the exchange, `None` reads
    /// on (the drain, or the grace the tool was just asked to clean up in).
    fn deadline_fired(
        &mut self,
        state: &mut RequestState,
        deadline: &mut Deadline,
    ) -> Option<Exchange> {
        match deadline.fire(DEADLINE_DRAIN) {
            Fired::Expired => Some(Exchange::Timeout {
                after_grace: deadline.grace_asked().is_some(),
            }),
            Fired::Grace => match state.timed_out(true) {
                Action::AskToCleanUp => {
                    // TimeoutError in the tool's main thread, so its
                    // `finally` and `with` run; its reply now is its
                    // clean-up's end, and the hard end is `at`.
                    self.processes.ask_to_clean_up();
                    None
                }
                _ => Some(Exchange::Timeout { after_grace: false }),
            },
            // A reply already in the pipe is the call's result: the worker
            // finished in time even if this process (stopped, or starved of
            // CPU) reads it late.
            Fired::Draining => None,
        }
    }

    /// A callback of the tool's: refused at once, or started as a task of
    /// `pending` (a human prompt first freezing the tool's processes, its
    /// timer stopped only once the kernel says they all are).
    async fn start_callback(
        &mut self,
        (call_id, method, params): (u64, String, Value),
        job: &JobParts,
        deadline: &mut Deadline,
        pending: &mut JoinSet<Result<Value, CallbackError>>,
    ) -> Started {
        let Some(handler) = job.callbacks.as_ref() else {
            return Started::Refused(CallbackError::new(
                "NotImplementedError",
                format!("context services are not available here ('{method}')"),
            ));
        };
        if pending.len() >= MAX_OPEN_CALLBACKS {
            return Started::Refused(CallbackError::new(
                "RuntimeError",
                format!("more than {MAX_OPEN_CALLBACKS} context service calls open at once"),
            ));
        }
        tracing::debug!(worker = self.pid(), call_id, %method, "callback");
        let human = handler.waits_for_human(&method);
        if human && deadline.prompt_opened() {
            // The whole frame has arrived: the tool's processes are frozen
            // here, and its timer stops only once the kernel says every
            // one of them is, so nothing of the tool runs while its timer
            // is stopped.
            if self.freeze().await {
                deadline.frozen();
            } else {
                self.thaw();
                tracing::warn!(
                    worker = self.pid(),
                    "{}: its processes could not all be stopped for the human prompt; \
                     its timer runs on while the human is asked",
                    job.label
                );
            }
        }
        let (handler, tool) = (handler.clone(), job.label.clone());
        let limit = self.spec.human_timeout.filter(|_| human);
        let task = pending.spawn(async move {
            let answer = handler.handle(&tool, &method, params);
            match limit {
                None => answer.await,
                Some(limit) => timeout(limit, answer).await.unwrap_or_else(|_| {
                    Err(CallbackError::new(
                        "HumanPromptUnavailable",
                        format!(
                            "no answer within {} s (--human-timeout)",
                            crate::duration_text::format_secs(limit)
                        ),
                    ))
                }),
            }
        });
        Started::Running(task.id(), human)
    }

    /// Writes a callback's answer to the worker, within the deadline unless
    /// a human is being asked (then it is suspended).
    async fn answer_callback(
        &mut self,
        call_id: u64,
        result: Result<Value, CallbackError>,
        stdin: &mut pipe::Sender,
        deadline: &Deadline,
    ) -> Result<(), Exchange> {
        let reply = match result {
            Ok(value) => CallbackReply::value(call_id, value),
            Err(error) => CallbackReply::error(call_id, &error.kind, &error.message),
        };
        let frame = match encode_frame(&reply, self.spec.max_frame) {
            Ok(frame) => frame,
            Err(e) => {
                let message = format!("the answer cannot be sent to the worker: {e}");
                let refusal = CallbackReply::error(call_id, "OverflowError", &message);
                encode_frame(&refusal, self.spec.max_frame).map_err(Exchange::Broken)?
            }
        };
        let written = if deadline.is_running() {
            timeout_at(deadline.at(), write_frame(stdin, &frame)).await
        } else {
            Ok(write_frame(stdin, &frame).await)
        };
        match written {
            Err(_) => Err(Exchange::Timeout {
                after_grace: deadline.grace_asked().is_some(),
            }),
            Ok(Err(e)) => Err(Exchange::Broken(e)),
            Ok(Ok(())) => Ok(()),
        }
    }
}

/// A callback started, or refused at once.
enum Started {
    Running(tokio::task::Id, bool),
    Refused(CallbackError),
}

/// What the handle did not write of the request, counted byte by byte: a
/// worker lost during the write is judged by how much of it reached the pipe.
async fn write_rest(
    frame: &[u8],
    state: &mut RequestState,
    stdin: &mut pipe::Sender,
    deadline: &Deadline,
) -> Result<(), Exchange> {
    while state.unwritten() > 0 {
        let rest = &frame[frame.len() - state.unwritten()..];
        match timeout_at(deadline.at(), stdin.write(rest)).await {
            Err(_) => return Err(Exchange::Timeout { after_grace: false }),
            Ok(Ok(0)) => return Err(Exchange::Broken(ProtocolError::Closed)),
            Ok(Ok(n)) => state.wrote(n),
            Ok(Err(e)) => return Err(Exchange::Broken(e.into())),
        }
    }
    Ok(())
}

/// The request's reply: its result; in the grace, the end of the tool's
/// clean-up (the call timed out).
fn replied(state: &mut RequestState, deadline: &Deadline, reply: Message) -> Exchange {
    match state.reply() {
        Err(refused) => return Exchange::Broken(ProtocolError::Malformed(refused.to_string())),
        Ok(Action::Deliver) => {}
        Ok(_) => {
            let asked = deadline.grace_asked().unwrap_or_else(Instant::now);
            return Exchange::CleanedUp {
                took: asked.elapsed(),
            };
        }
    }
    let Message::Reply {
        ok,
        value,
        error,
        value_json,
        value_marshal,
        content,
        ..
    } = reply
    else {
        return Exchange::Broken(ProtocolError::Unexpected("a reply that is not one"));
    };
    match (ok, error) {
        (true, _) => Exchange::Reply(ReplyValue::decode(
            value,
            value_json,
            value_marshal,
            content,
        )),
        (false, Some(error)) => Exchange::Reply(Err(error)),
        (false, None) => {
            Exchange::Broken(ProtocolError::Unexpected("a failed reply without an error"))
        }
    }
}

enum Exchange {
    Reply(Result<ReplyValue, RemoteError>),
    /// Past the deadline (and its grace, if the tool was given one).
    Timeout {
        after_grace: bool,
    },
    /// Past the deadline, the tool answered within its grace, `took` after
    /// it was asked to clean up.
    CleanedUp {
        took: std::time::Duration,
    },
    Broken(ProtocolError),
    /// The caller gave up.
    Abandoned,
}

/// A callback's task, ended: its answer, or how the task failed.
type Answered = Result<(tokio::task::Id, Result<Value, CallbackError>), tokio::task::JoinError>;

/// What woke an exchange up.
enum Event {
    Message(Result<Message, ProtocolError>),
    Answered(Answered),
    Deadline,
    /// The caller gave up (the answer's receiver is gone).
    Abandoned,
    /// The worker's kill switch was pulled.
    KillSwitch,
}
