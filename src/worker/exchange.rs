//! One request's exchange with a worker, run by its actor: the request
//! written, its callbacks served, requests queued behind it written, its
//! reply read, its deadline kept (paused while a human is asked), and the
//! worker killed if its caller gives up.

use std::collections::HashMap;

use serde_json::Value;
use tokio::task::JoinSet;
use tokio::time::{timeout, timeout_at, Instant};

use super::actor::{Actor, JobParts};
use super::deadline::{Deadline, Fired};
use super::{
    CallOutcome, CallbackError, Termination, DEADLINE_DRAIN, HANGUP_EXIT_WAIT, MAX_OPEN_CALLBACKS,
};
use crate::protocol::{
    encode_frame, next_message, write_frame, CallbackReply, Message, ProtocolError, RemoteError,
    ReplyValue,
};

impl Actor {
    /// Runs request `id` (`frame`: what is left to write; `None` when on
    /// the wire already) to its end; `None` when its caller gave up
    /// (`job`'s answer channel closed) and the worker was killed.
    /// `written_at`: when the handle began writing it (its deadline runs
    /// from then, else from now).
    pub(super) async fn run(
        &mut self,
        id: u64,
        frame: Option<&[u8]>,
        written_at: Option<Instant>,
        job: &mut JobParts,
    ) -> Option<CallOutcome> {
        let call = format!("{}#{id}", job.label);
        if let Ok(mut tag) = self.call_tag.lock() {
            *tag = Some(call.clone());
        }
        let outcome = match self.exchange(id, frame, written_at, job).await {
            // The worker said so in the memory it shares (`ack`), not in a
            // frame: it started the request before it broke.
            Exchange::NotStarted(e) if self.ack.started(id) => Exchange::Broken(e),
            outcome => outcome,
        };
        let label = &job.label;
        if let Ok(mut tag) = self.call_tag.lock() {
            *tag = None;
        }
        let previous = self.last_call.replace(call);
        Some(match outcome {
            Exchange::Reply(reply) => CallOutcome::Reply(reply),
            Exchange::Withdrawn => CallOutcome::Withdrawn,
            Exchange::Abandoned => {
                // A call in flight leaves the worker in an unknown state.
                self.kill_now();
                return None;
            }
            Exchange::Timeout => {
                let stuck_at = self.stack_dump().await;
                // Every process of the call dies now (the worker by pidfd,
                // its group, and in a PID namespace everything in it); the
                // guardian's clean-up and its reaping are finished by
                // `kill`, which the pool awaits before it shuts down.
                self.kill_now();
                CallOutcome::TimedOut { stuck_at }
            }
            Exchange::NotStarted(e) => {
                let termination = self.end_broken(e).await;
                let after = previous.as_deref().unwrap_or("its start");
                tracing::warn!(
                    worker = self.pid(),
                    "the worker was found broken after {after}, before it started {label}: it {termination}"
                );
                CallOutcome::NotStarted(termination)
            }
            Exchange::Broken(e) => CallOutcome::Died(self.end_broken(e).await),
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

    /// Sends a request and reads until its reply, serving the tool's
    /// callbacks meanwhile. Callbacks run as tasks of their own, concurrently
    /// with the read: a tool may wait for a human while another of its
    /// threads registers files, and a worker that dies while a prompt is
    /// open is noticed at once. While any callback waits for a human the
    /// deadline is suspended and the worker's processes are stopped; they
    /// resume, the deadline pushed back by the wait, before the answer is
    /// written.
    async fn exchange(
        &mut self,
        id: u64,
        frame: Option<&[u8]>,
        written_at: Option<Instant>,
        job: &mut JobParts,
    ) -> Exchange {
        // Dropped with the exchange (the call was cancelled): any callback
        // still running, a human prompt say, is aborted with it. Otherwise
        // they are over (aborted if need be) before the call returns.
        let mut pending = JoinSet::new();
        // From the moment this request starts running.
        let mut deadline = Deadline::new(written_at.unwrap_or_else(Instant::now) + job.timeout);
        let outcome = self
            .exchange_serving(id, frame, &mut deadline, job, &mut pending)
            .await;
        if !pending.is_empty() {
            pending.shutdown().await;
        }
        if !deadline.is_running() {
            // Still stopped for a human when the call ended: let it go (it is
            // being killed, or it answered meanwhile).
            self.pause(false);
        }
        outcome
    }

    async fn exchange_serving(
        &mut self,
        id: u64,
        frame: Option<&[u8]>,
        deadline: &mut Deadline,
        job: &mut JobParts,
        pending: &mut JoinSet<Result<Value, CallbackError>>,
    ) -> Exchange {
        let JobParts {
            label,
            callbacks,
            acknowledges,
            outcome: answer,
            ..
        } = job;
        // A request the worker does not acknowledge counts as started. (A
        // `started` frame is the older way to say it: `run` reads the
        // shared cell as well.)
        let mut acknowledged = !*acknowledges;
        let Some(stdin) = self.stdin.as_mut() else {
            return Exchange::Broken(ProtocolError::Closed);
        };
        // None: queued behind the call before, and written already.
        if let Some(frame) = frame {
            match timeout_at(deadline.at(), write_frame(stdin, frame)).await {
                Err(_) => return Exchange::Timeout,
                Ok(Err(e)) if !acknowledged => return Exchange::NotStarted(e),
                Ok(Err(e)) => return Exchange::Broken(e),
                Ok(Ok(())) => {}
            }
        }
        let slot = self.slot.clone();
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
                // Not while the worker is stopped for a human: a write could fill the pipe.
                () = slot.wake().notified(), if deadline.is_running() => Event::Queue,
                () = answer.closed() => Event::Abandoned,
            };
            let (call_id, result) = match event {
                Event::Abandoned => return Exchange::Abandoned,
                Event::Deadline => match deadline.fire(DEADLINE_DRAIN) {
                    Fired::Expired => return Exchange::Timeout,
                    // A reply already in the pipe is the call's result: the
                    // worker finished in time even if this process (stopped,
                    // or starved of CPU) reads it late.
                    Fired::Draining => continue,
                },
                Event::Queue => {
                    let frames = match slot.frames_to_write(self.spec.max_frame) {
                        Ok(frames) => frames,
                        Err(e) => return Exchange::Broken(e),
                    };
                    if frames.is_empty() {
                        continue;
                    }
                    let Some(stdin) = self.stdin.as_mut() else {
                        return Exchange::Broken(ProtocolError::Closed);
                    };
                    match timeout_at(deadline.at(), write_frame(stdin, &frames)).await {
                        Err(_) => return Exchange::Timeout,
                        // The worker is gone (its end of the pipe is closed)
                        // — but this call's reply may be in the pipe already,
                        // ahead of the end: read on. The queued requests are
                        // lost with the worker.
                        Ok(Err(_)) | Ok(Ok(())) => continue,
                    }
                }
                Event::Message(Ok(Message::Withdrawn { id: got })) if got == id => {
                    // This call's own request, queued behind the call before:
                    // given back unstarted. The worker is sound (it may
                    // hold requests queued behind this one); the call checks
                    // out again once the pool hands it the worker. (Its
                    // place in the slot stays until then: the pool hands
                    // the worker over in the order the requests were queued.)
                    return Exchange::Withdrawn;
                }
                Event::Message(Ok(Message::Withdrawn { id: got })) => {
                    slot.withdrawn(got);
                    continue;
                }
                Event::Message(Err(e)) if !acknowledged => return Exchange::NotStarted(e),
                Event::Message(Err(e)) => return Exchange::Broken(e),
                Event::Message(Ok(Message::Started { id: got })) if got == id => {
                    acknowledged = true;
                    continue;
                }
                Event::Message(Ok(Message::Reply {
                    id: got,
                    ok,
                    value,
                    error,
                    value_json,
                    value_marshal,
                    content,
                })) if got == id => {
                    return Exchange::Reply(if ok {
                        ReplyValue::decode(value, value_json, value_marshal, content)
                    } else {
                        Err(error.unwrap_or_else(|| RemoteError {
                            kind: "WorkerDied".into(),
                            message: "the worker reported a failure without an error".into(),
                            traceback: None,
                        }))
                    });
                }
                Event::Message(Ok(Message::Reply { id: got, .. }))
                | Event::Message(Ok(Message::Started { id: got })) => {
                    tracing::warn!(
                        worker = self.pid(),
                        id = got,
                        "dropping a reply whose request is not in flight"
                    );
                    continue;
                }
                Event::Message(Ok(Message::Hello { .. })) => {
                    let e = ProtocolError::Unexpected("a second hello");
                    return if acknowledged {
                        Exchange::Broken(e)
                    } else {
                        Exchange::NotStarted(e)
                    };
                }
                Event::Message(Ok(Message::Importing { .. })) => {
                    let e = ProtocolError::Unexpected("an import after the hello");
                    return if acknowledged {
                        Exchange::Broken(e)
                    } else {
                        Exchange::NotStarted(e)
                    };
                }
                Event::Message(Ok(Message::Call {
                    id: call_id,
                    method,
                    params,
                })) => match callbacks.as_ref() {
                    None => {
                        let error = CallbackError::new(
                            "NotImplementedError",
                            format!("context services are not available here ('{method}')"),
                        );
                        (call_id, Err(error))
                    }
                    Some(_) if pending.len() >= MAX_OPEN_CALLBACKS => {
                        let error = CallbackError::new(
                            "RuntimeError",
                            format!(
                                "more than {MAX_OPEN_CALLBACKS} context service calls open at once"
                            ),
                        );
                        (call_id, Err(error))
                    }
                    Some(handler) => {
                        tracing::debug!(worker = self.pid(), call_id, %method, "callback");
                        let human = handler.waits_for_human(&method);
                        if human && deadline.pause() {
                            // The whole frame has arrived: the tool's
                            // processes stop here, so nothing of the
                            // tool runs while its timer is paused.
                            self.pause(true);
                        }
                        let (handler, tool) = (handler.clone(), label.to_string());
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
                        in_flight.insert(task.id(), (call_id, human));
                        continue;
                    }
                },
                Event::Answered(done) => {
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
                    let Some((call_id, human)) = in_flight.remove(&task) else {
                        continue;
                    };
                    if human && deadline.resume() {
                        // Running again before the answer is written, so
                        // the thread waiting for it can read it.
                        self.pause(false);
                    }
                    (call_id, result)
                }
            };
            let reply = match result {
                Ok(value) => CallbackReply::value(call_id, value),
                Err(error) => CallbackReply::error(call_id, &error.kind, &error.message),
            };
            let frame = match encode_frame(&reply, self.spec.max_frame) {
                Ok(frame) => frame,
                Err(e) => {
                    let message = format!("the answer cannot be sent to the worker: {e}");
                    match encode_frame(
                        &CallbackReply::error(call_id, "OverflowError", &message),
                        self.spec.max_frame,
                    ) {
                        Ok(frame) => frame,
                        Err(e) => return Exchange::Broken(e),
                    }
                }
            };
            let Some(stdin) = self.stdin.as_mut() else {
                return Exchange::Broken(ProtocolError::Closed);
            };
            // While a human is being asked the deadline is suspended.
            let written = if deadline.is_running() {
                timeout_at(deadline.at(), write_frame(stdin, &frame)).await
            } else {
                Ok(write_frame(stdin, &frame).await)
            };
            match written {
                Err(_) => return Exchange::Timeout,
                Ok(Err(e)) => return Exchange::Broken(e),
                Ok(Ok(())) => {}
            }
        }
    }
}

enum Exchange {
    Reply(Result<ReplyValue, RemoteError>),
    /// The request, queued behind the call before, was given back unstarted.
    Withdrawn,
    Timeout,
    Broken(ProtocolError),
    /// Broken before it acknowledged the request.
    NotStarted(ProtocolError),
    /// The caller gave up.
    Abandoned,
}

/// What woke an exchange up.
enum Event {
    Message(Result<Message, ProtocolError>),
    Answered(Result<(tokio::task::Id, Result<Value, CallbackError>), tokio::task::JoinError>),
    Deadline,
    /// The pool queued a request behind this call, or wants it back.
    Queue,
    /// The caller gave up (the answer's receiver is gone).
    Abandoned,
}
