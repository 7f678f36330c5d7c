//! `GET /healthz` and `GET /readyz`, for load balancers and Kubernetes
//! probes, on the MCP HTTP listener and on `--metrics`'s.
//!
//! - `/healthz`: 200 while the process serves HTTP at all (liveness).
//! - `/readyz`: 200 while the pool takes calls — workers are up, the catalog
//!   loaded (a pool exists only once it has), and it is not draining; 503
//!   from the moment SIGTERM arrives (readiness), while the calls in flight
//!   finish within `--grace`.
//!
//! They need no token and say nothing but the state, so that probes that
//! cannot send headers work.

use hyper::{Method, StatusCode};

use crate::pool::Pool;

pub(crate) const HEALTHZ: &str = "/healthz";
pub(crate) const READYZ: &str = "/readyz";

/// The answer to a health request (`path` one of [`HEALTHZ`], [`READYZ`]),
/// or `None` for any other path.
pub(crate) fn respond(method: &Method, path: &str, pool: &Pool) -> Option<(StatusCode, String)> {
    if path != HEALTHZ && path != READYZ {
        return None;
    }
    if method != Method::GET && method != Method::HEAD {
        return Some((
            StatusCode::METHOD_NOT_ALLOWED,
            format!("method not allowed: {method} (only GET and HEAD)\n"),
        ));
    }
    if path == HEALTHZ {
        return Some((StatusCode::OK, "ok\n".into()));
    }
    Some(match readiness(pool) {
        Ok(()) => (StatusCode::OK, "ready\n".into()),
        Err(why) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: {why}\n"),
        ),
    })
}

fn readiness(pool: &Pool) -> Result<(), &'static str> {
    if pool.is_closed() {
        Err("the pool is shut down")
    } else if pool.is_draining() {
        Err("draining: shutting down, finishing the calls in flight")
    } else if pool.live_workers() == 0 {
        Err("no worker is running")
    } else {
        Ok(())
    }
}
