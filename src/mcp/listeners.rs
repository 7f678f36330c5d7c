//! Who is told that the tool list changed (`--watch`).
//!
//! Two kinds of listener, one per protocol era:
//! - a session that began with `initialize` (2025-11-25 and older) gets
//!   `notifications/tools/list_changed` on its connection;
//! - a 2026-07-28 client has no session to notify: it opens a
//!   `subscriptions/listen` request, and the notification is sent on that
//!   request's stream for as long as it stays open.
//!
//! A listener whose connection is gone is dropped the first time sending to
//! it fails.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use rmcp::service::SubscriptionSink;
use rmcp::{Peer, RoleServer};

#[derive(Clone)]
enum Listener {
    Session(Peer<RoleServer>),
    Stream(SubscriptionSink),
}

#[derive(Default)]
pub struct Listeners {
    next_id: AtomicU64,
    listeners: Mutex<Vec<(u64, Listener)>>,
}

impl Listeners {
    /// A session that negotiated with `initialize`.
    pub fn add_session(&self, peer: Peer<RoleServer>) -> u64 {
        self.add(Listener::Session(peer))
    }

    /// An open `subscriptions/listen` stream; [`Self::remove`] it when it ends.
    pub fn add_stream(&self, sink: SubscriptionSink) -> u64 {
        self.add(Listener::Stream(sink))
    }

    fn add(&self, listener: Listener) -> u64 {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        self.lock().push((id, listener));
        id
    }

    pub fn remove(&self, id: u64) {
        self.lock().retain(|(each, _)| *each != id);
    }

    /// Sends the list-changed notification to every listener; forgets those
    /// that cannot be reached any more. Returns how many were told.
    pub async fn notify_tool_list_changed(&self) -> usize {
        let listeners = self.lock().clone();
        let mut told = 0;
        for (id, listener) in listeners {
            let sent = match &listener {
                Listener::Session(peer) if peer.is_transport_closed() => {
                    Err("connection closed".into())
                }
                Listener::Session(peer) => peer
                    .notify_tool_list_changed()
                    .await
                    .map_err(|e| e.to_string()),
                Listener::Stream(sink) => sink
                    .notify_tool_list_changed()
                    .await
                    .map_err(|e| e.to_string()),
            };
            match sent {
                Ok(()) => told += 1,
                Err(error) => {
                    tracing::debug!(listener = id, "dropping a list-change listener: {error}");
                    self.remove(id);
                }
            }
        }
        told
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<(u64, Listener)>> {
        match self.listeners.lock() {
            Ok(guard) => guard,
            Err(poisoned) => poisoned.into_inner(),
        }
    }
}
