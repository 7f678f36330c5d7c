//! The answers still on their way to HTTP clients, so that a shutdown ends
//! the sessions only once they have been sent.
//!
//! A call's answer travels from the handler through rmcp's session worker
//! into the SSE stream of the request's POST, which hyper writes out. Ending
//! the sessions (the token every SSE stream stops at) while an answer is
//! anywhere on that way loses it: the stream stops before its buffered
//! messages. So every POST's response body is counted from the moment it is
//! made until it ends (its last frame polled) or hyper drops it, and the
//! shutdown waits for none left, within its grace, before ending sessions.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use hyper::body::{Body, Bytes, Frame, SizeHint};
use tokio::sync::watch;

use super::tenant_limits::CallPermit;

/// Counts the POST response bodies not yet ended.
#[derive(Clone)]
pub(in crate::mcp) struct AnswersInFlight {
    count: Arc<watch::Sender<usize>>,
}

impl AnswersInFlight {
    pub(in crate::mcp) fn new() -> AnswersInFlight {
        AnswersInFlight {
            count: Arc::new(watch::channel(0).0),
        }
    }

    /// `body`, counted until it ends or is dropped, holding `also` (a
    /// tenant's call permit) as long.
    pub(in crate::mcp) fn track_holding<B>(&self, body: B, also: Option<CallPermit>) -> Counted<B> {
        self.count.send_modify(|n| *n += 1);
        Counted {
            inner: body,
            guard: Some(Guard {
                count: self.count.clone(),
                _permit: also,
            }),
        }
    }

    /// How many bodies are counted now.
    pub(in crate::mcp) fn count(&self) -> usize {
        *self.count.borrow()
    }

    /// Waits until no body is counted, at most `bound`; whether none is.
    pub(in crate::mcp) async fn wait_none(&self, bound: Duration) -> bool {
        let mut counted = self.count.subscribe();
        let none = tokio::time::timeout(bound, counted.wait_for(|n| *n == 0)).await;
        none.is_ok()
    }
}

/// Counts one body while it lives.
struct Guard {
    count: Arc<watch::Sender<usize>>,
    /// Held for its drop: the tenant's call ends with its answer.
    _permit: Option<CallPermit>,
}

impl Drop for Guard {
    fn drop(&mut self) {
        self.count.send_modify(|n| *n = n.saturating_sub(1));
    }
}

/// A response body counted by [`AnswersInFlight`] until its end.
pub(in crate::mcp) struct Counted<B> {
    inner: B,
    guard: Option<Guard>,
}

impl<B: Body<Data = Bytes> + Unpin> Body for Counted<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_frame(cx);
        if let Poll::Ready(None) = polled {
            // Ended: hyper may keep the body a while longer.
            this.guard.take();
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
