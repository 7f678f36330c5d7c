//! Built without the `http` feature: every call runs in the pool's own
//! session, and no client closes a session under a call (the HTTP
//! transport's `SessionCalls`, for stdio alone).

use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};

use crate::context::Session;
use crate::mcp::splice::Splices;

/// The calls of the one stdio connection.
#[derive(Clone, Default)]
pub(in crate::mcp) struct SessionCalls {
    /// Large texts of direct answers, spliced in as stdout is written.
    splices: Option<Splices>,
}

impl SessionCalls {
    /// The connection's calls, whose large texts go out spliced.
    pub(in crate::mcp) fn with_splices(splices: Splices) -> SessionCalls {
        SessionCalls {
            splices: Some(splices),
        }
    }

    /// The pool's own session, always.
    pub(in crate::mcp) fn session(
        &self,
        _context: &rmcp::service::RequestContext<rmcp::RoleServer>,
    ) -> Result<Option<std::sync::Arc<Session>>, String> {
        Ok(None)
    }

    /// None: stdio has one user.
    pub(in crate::mcp) fn tenant(
        &self,
        _context: &rmcp::service::RequestContext<rmcp::RoleServer>,
    ) -> Option<String> {
        None
    }

    /// A direct answer's text as it goes out: a large one stood in for,
    /// and spliced in as stdout is written.
    pub(in crate::mcp) fn stand_in(&self, text: String) -> String {
        match &self.splices {
            Some(splices) => splices.stand_in(text),
            None => text,
        }
    }

    /// stdio.
    pub(in crate::mcp) fn transport(&self) -> crate::mcp::calls::spans::Transport {
        crate::mcp::calls::spans::Transport::Pipe
    }

    /// None: stdio has no MCP session id.
    pub(in crate::mcp) fn mcp_session_id(
        &self,
        _context: &rmcp::service::RequestContext<rmcp::RoleServer>,
    ) -> Option<String> {
        None
    }

    /// Never resolves: stdio has no session to close.
    pub(in crate::mcp) fn closed(
        &self,
        _context: &rmcp::service::RequestContext<rmcp::RoleServer>,
    ) -> WaitForCancellationFutureOwned {
        CancellationToken::new().cancelled_owned()
    }
}
