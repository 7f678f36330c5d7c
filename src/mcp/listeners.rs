//! Who is told that the tool or resource list changed (`--watch`), and that
//! a subscribed resource may have changed.
//!
//! Two kinds of listener, one per protocol era:
//! - a session that began with `initialize` (2025-11-25 and older) gets
//!   `notifications/tools/list_changed` and
//!   `notifications/resources/list_changed` on its connection (with
//!   `--watch`), and `notifications/resources/updated` for each URI it
//!   subscribed to with `resources/subscribe`;
//! - a 2026-07-28 client has no session to notify: it opens a
//!   `subscriptions/listen` request, and the notifications its accepted
//!   filter names are sent on that request's stream for as long as it stays
//!   open.
//!
//! toolpool learns of one change to a resource: a reload of the code that
//! serves it (a function's `mcp_resource`). A listener whose connection is
//! gone is dropped the first time sending to it fails.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use rmcp::service::SubscriptionSink;
use rmcp::{Peer, RoleServer};

#[derive(Clone)]
enum Channel {
    Session(Peer<RoleServer>),
    Stream(SubscriptionSink),
}

/// A listener: where it is told, and of what.
#[derive(Clone)]
struct Listener {
    channel: Channel,
    /// Told when the lists change (a session under `--watch`; a stream
    /// whose filter accepted them: the sink checks that itself).
    lists: bool,
    /// The resources it subscribed to.
    uris: BTreeSet<String>,
}

/// What changed in a reload.
pub(super) enum Change {
    Tools,
    Resources,
}

#[derive(Default)]
pub(super) struct Listeners {
    next_id: AtomicU64,
    listeners: Mutex<Vec<(u64, Listener)>>,
}

impl Listeners {
    /// A session that negotiated with `initialize`, told of list changes
    /// when `lists`.
    pub(super) fn add_session(&self, peer: Peer<RoleServer>, lists: bool) -> u64 {
        self.add(Channel::Session(peer), lists, BTreeSet::new())
    }

    /// An open `subscriptions/listen` stream and the resources its accepted
    /// filter names; [`Self::remove`] it when it ends.
    pub(super) fn add_stream(&self, sink: SubscriptionSink, uris: BTreeSet<String>) -> u64 {
        self.add(Channel::Stream(sink), true, uris)
    }

    fn add(&self, channel: Channel, lists: bool, uris: BTreeSet<String>) -> u64 {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let listener = Listener {
            channel,
            lists,
            uris,
        };
        self.lock().push((id, listener));
        id
    }

    pub(super) fn remove(&self, id: u64) {
        self.lock().retain(|(each, _)| *each != id);
    }

    /// Adds (`subscribe`) or removes `uri` from listener `id`'s
    /// subscriptions; false when there is no such listener.
    pub(super) fn subscription(&self, id: u64, uri: &str, subscribe: bool) -> bool {
        let mut listeners = self.lock();
        let Some((_, listener)) = listeners.iter_mut().find(|(each, _)| *each == id) else {
            return false;
        };
        if subscribe {
            listener.uris.insert(uri.to_string());
        } else {
            listener.uris.remove(uri);
        }
        true
    }

    /// Sends the list-changed notification of `change` to every listener
    /// of lists; forgets those that cannot be reached any more. Returns how
    /// many were told.
    pub(super) async fn notify_list_changed(&self, change: Change) -> usize {
        let listeners = self.lock().clone();
        let mut told = 0;
        for (id, listener) in listeners.into_iter().filter(|(_, l)| l.lists) {
            let sent = match (&listener.channel, &change) {
                (Channel::Session(peer), _) if peer.is_transport_closed() => {
                    Err("connection closed".into())
                }
                (Channel::Session(peer), Change::Tools) => peer
                    .notify_tool_list_changed()
                    .await
                    .map_err(|e| e.to_string()),
                (Channel::Session(peer), Change::Resources) => peer
                    .notify_resource_list_changed()
                    .await
                    .map_err(|e| e.to_string()),
                (Channel::Stream(sink), Change::Tools) => sink
                    .notify_tool_list_changed()
                    .await
                    .map_err(|e| e.to_string()),
                (Channel::Stream(sink), Change::Resources) => sink
                    .notify_resource_list_changed()
                    .await
                    .map_err(|e| e.to_string()),
            };
            told += self.sent(id, sent);
        }
        told
    }

    /// Sends `notifications/resources/updated` for every subscribed URI
    /// that `changed` says may have changed. Returns how many were sent.
    pub(super) async fn notify_updated(&self, changed: impl Fn(&str) -> bool) -> usize {
        let listeners = self.lock().clone();
        let mut told = 0;
        for (id, listener) in listeners {
            for uri in listener.uris.iter().filter(|uri| changed(uri)) {
                let sent = match &listener.channel {
                    Channel::Session(peer) if peer.is_transport_closed() => {
                        Err("connection closed".into())
                    }
                    Channel::Session(peer) => peer
                        .notify_resource_updated(
                            rmcp::model::ResourceUpdatedNotificationParam::new(uri.clone()),
                        )
                        .await
                        .map_err(|e| e.to_string()),
                    Channel::Stream(sink) => sink
                        .notify_resource_updated(uri.clone())
                        .await
                        .map_err(|e| e.to_string()),
                };
                if self.sent(id, sent) == 0 {
                    break;
                }
                told += 1;
            }
        }
        told
    }

    /// 1 when sent; else forgets listener `id` and returns 0.
    fn sent(&self, id: u64, sent: Result<(), String>) -> usize {
        match sent {
            Ok(()) => 1,
            Err(error) => {
                tracing::debug!(listener = id, "dropping a listener: {error}");
                self.remove(id);
                0
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<(u64, Listener)>> {
        match self.listeners.lock() {
            Ok(guard) => guard,
            Err(poisoned) => poisoned.into_inner(),
        }
    }
}
