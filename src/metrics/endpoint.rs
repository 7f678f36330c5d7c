//! The `/metrics` endpoint (`serve --metrics ADDR`), with the health
//! endpoints beside it.

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::{Method, Request, Response, StatusCode};

use super::render;
use crate::http::conn::{serve_connection, ConnectionCap};
use crate::mcp::{authority_and_origin, is_loopback_host};
use crate::pool::Pool;

/// Serves `GET /metrics` (and the health endpoints, `/healthz` and `/readyz`) on
/// `listener` until the task is dropped: other methods get 405, other paths
/// 404. On a loopback address the `Host` header
/// must name a loopback host (DNS rebinding). Connections are capped and must
/// send their header in time, as on the MCP endpoint.
pub async fn serve(listener: tokio::net::TcpListener, pool: Pool) -> std::io::Result<()> {
    let local = listener.local_addr()?;
    tracing::info!("metrics at http://{local}/metrics");
    let cap = ConnectionCap::new(MAX_CONNECTIONS, "the metrics endpoint's cap");
    let loopback = local.ip().is_loopback();
    loop {
        let (stream, _) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                // Out of file descriptors and the like: wait, go on.
                tracing::warn!("metrics: accept failed: {e}");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        let Some(permit) = cap.try_permit() else {
            cap.refuse(stream);
            continue;
        };
        let pool = pool.clone();
        tokio::spawn(async move {
            let _permit = permit;
            let service = hyper::service::service_fn(move |request: Request<Incoming>| {
                let pool = pool.clone();
                async move { Ok::<_, std::convert::Infallible>(respond(&request, &pool, loopback)) }
            });
            if let Err(e) = serve_connection(stream, service, std::future::pending()).await {
                tracing::debug!("metrics connection: {e}");
            }
        });
    }
}

/// Scrapers open one connection at a time; this leaves room for a few.
const MAX_CONNECTIONS: usize = 64;

fn respond(request: &Request<Incoming>, pool: &Pool, loopback: bool) -> Response<Full<Bytes>> {
    let host = authority_and_origin(request).map(|(host, _)| host);
    let (status, content_type, body) = if let Err(why) = &host {
        (
            StatusCode::FORBIDDEN,
            "text/plain",
            format!("forbidden: {why}\n"),
        )
    } else if loopback && !host.ok().flatten().is_some_and(is_loopback_host) {
        (
            StatusCode::FORBIDDEN,
            "text/plain",
            "forbidden: on a loopback address the Host header must name a loopback host\n"
                .to_string(),
        )
    } else if let Some((status, body)) =
        crate::http::health::respond(request.method(), request.uri().path(), pool)
    {
        (status, "text/plain", body)
    } else if request.uri().path() != "/metrics" {
        (
            StatusCode::NOT_FOUND,
            "text/plain",
            "not found: metrics are at /metrics (health at /healthz, /readyz)\n".to_string(),
        )
    } else if request.method() != Method::GET {
        (
            StatusCode::METHOD_NOT_ALLOWED,
            "text/plain",
            format!("method not allowed: {} (only GET)\n", request.method()),
        )
    } else {
        (
            StatusCode::OK,
            "text/plain; version=0.0.4",
            render(&pool.stats()),
        )
    };
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    if let Ok(value) = content_type.parse() {
        response
            .headers_mut()
            .insert(hyper::header::CONTENT_TYPE, value);
    }
    if status == StatusCode::METHOD_NOT_ALLOWED {
        response.headers_mut().insert(
            hyper::header::ALLOW,
            hyper::header::HeaderValue::from_static("GET"),
        );
    }
    response
}
