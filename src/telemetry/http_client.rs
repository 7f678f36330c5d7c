//! The exporter's HTTP client: opentelemetry-http's hyper client, run on
//! the server's tokio runtime.
//!
//! The SDK's batch processor exports from a thread of its own, polling the
//! export with a plain executor, where hyper (which needs tokio's reactor
//! and timers) cannot run; each request is therefore spawned onto the
//! runtime and awaited from that thread.

use std::time::Duration;

use opentelemetry_http::hyper::HyperClient;
use opentelemetry_http::{Bytes, HttpClient, HttpError, Request, Response};

/// [`HyperClient`] whose requests run on `runtime`.
#[derive(Debug)]
pub(super) struct OnRuntime {
    client: HyperClient,
    runtime: tokio::runtime::Handle,
}

impl OnRuntime {
    pub(super) fn new(runtime: tokio::runtime::Handle, timeout: Duration) -> OnRuntime {
        // Made on the runtime: hyper's connection pool starts its timer there.
        let _entered = runtime.enter();
        OnRuntime {
            client: HyperClient::with_default_connector(timeout, None),
            runtime,
        }
    }
}

#[async_trait::async_trait]
impl HttpClient for OnRuntime {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let client = self.client.clone();
        let sent = self
            .runtime
            .spawn(async move { client.send_bytes(request).await });
        match sent.await {
            Ok(response) => response,
            // The runtime is shutting down (or the request panicked).
            Err(error) => Err(Box::new(error)),
        }
    }
}
