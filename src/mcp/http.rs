//! MCP over streamable HTTP (`serve --http ADDR`), served with hyper.
//!
//! Every HTTP session gets a handle on the same server (one pool, one tool
//! set). The endpoint is `/mcp`; the address is loopback unless a host is
//! given, and then rmcp's DNS-rebinding guard (the `Host` header must name a
//! loopback host) stays on only for loopback addresses.

use std::net::{IpAddr, Ipv4Addr, SocketAddr, ToSocketAddrs};
use std::sync::Arc;
use std::time::Duration;

use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use tokio::net::TcpListener;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::{stop_signal, ServeError, ToolpoolServer};

/// The path the MCP endpoint is served at.
pub const ENDPOINT: &str = "/mcp";

/// `PORT`, `:PORT`, `HOST:PORT` or `[IPv6]:PORT`; a bare port is on the
/// loopback address, `localhost` is 127.0.0.1.
pub fn parse_http_addr(text: &str) -> Result<SocketAddr, String> {
    let text = text.trim();
    let port_only = text.strip_prefix(':').unwrap_or(text);
    if let Ok(port) = port_only.parse::<u16>() {
        return Ok(SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port));
    }
    if let Ok(addr) = text.parse::<SocketAddr>() {
        return Ok(addr);
    }
    let Some((host, port)) = text.rsplit_once(':') else {
        return Err(format!(
            "'{text}' is not an address: give PORT, HOST:PORT or [IPv6]:PORT"
        ));
    };
    let port: u16 = port
        .parse()
        .map_err(|_| format!("'{port}' in '{text}' is not a port number"))?;
    if host.eq_ignore_ascii_case("localhost") {
        return Ok(SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port));
    }
    (host, port)
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve '{host}': {e}"))?
        .next()
        .ok_or_else(|| format!("'{host}' resolves to no address"))
}

pub(super) async fn serve(
    server: ToolpoolServer,
    addr: SocketAddr,
    grace: Duration,
) -> Result<(), ServeError> {
    let listener = match TcpListener::bind(addr).await {
        Ok(listener) => listener,
        Err(source) => {
            server.pool().shutdown_with_grace(Duration::ZERO).await;
            return Err(ServeError::Bind { addr, source });
        }
    };
    let local = listener.local_addr().unwrap_or(addr);
    let sessions = CancellationToken::new();
    let mut config =
        StreamableHttpServerConfig::default().with_cancellation_token(sessions.clone());
    if !local.ip().is_loopback() {
        tracing::warn!(
            "serving MCP on {local}, which is not a loopback address: any host that can reach it can call the tools"
        );
        config = config.disable_allowed_hosts();
    }
    let handler = server.clone();
    let service = StreamableHttpService::new(
        move || Ok(handler.clone()),
        Arc::new(LocalSessionManager::default()),
        config,
    );
    // Tests and scripts that ask for port 0 learn the port from this line.
    eprintln!("toolpool: serving MCP (streamable HTTP) at http://{local}{ENDPOINT}");
    tracing::info!(%local, "serving MCP over streamable HTTP");

    let stop = stop_signal();
    tokio::pin!(stop);
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let (stream, peer) = match accepted {
                    Ok(accepted) => accepted,
                    Err(e) => {
                        // Out of file descriptors and the like: wait, go on.
                        tracing::warn!("accept failed: {e}");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let service = service.clone();
                connections.spawn(async move {
                    let route = hyper::service::service_fn(move |request: Request<Incoming>| {
                        let mut service = service.clone();
                        async move {
                            if request.uri().path() != ENDPOINT {
                                return Ok::<_, std::convert::Infallible>(not_found());
                            }
                            let response = tower_service::Service::call(&mut service, request).await?;
                            Ok(response.map(http_body_util::Either::Right))
                        }
                    });
                    if let Err(e) = http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), route)
                        .await
                    {
                        tracing::debug!(%peer, "HTTP connection ended: {e}");
                    }
                });
            }
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            _ = &mut stop => break,
        }
    }
    drop(listener);
    server.shut_down(grace).await;
    // Ends every session (and so its SSE streams); give the connections a
    // moment to flush what they were sending.
    sessions.cancel();
    let flushed = tokio::time::timeout(Duration::from_secs(2), async {
        while connections.join_next().await.is_some() {}
    })
    .await;
    if flushed.is_err() {
        connections.abort_all();
    }
    Ok(())
}

type NotFoundBody = http_body_util::Full<hyper::body::Bytes>;

fn not_found<B>() -> Response<http_body_util::Either<NotFoundBody, B>> {
    let mut response = Response::new(http_body_util::Either::Left(NotFoundBody::from(format!(
        "not found: the MCP endpoint is {ENDPOINT}\n"
    ))));
    *response.status_mut() = StatusCode::NOT_FOUND;
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_default_to_loopback() {
        let loopback = |port| SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port);
        assert_eq!(parse_http_addr("8080"), Ok(loopback(8080)));
        assert_eq!(parse_http_addr(":8080"), Ok(loopback(8080)));
        assert_eq!(parse_http_addr("localhost:0"), Ok(loopback(0)));
        assert_eq!(
            parse_http_addr("0.0.0.0:9000"),
            Ok("0.0.0.0:9000".parse().unwrap())
        );
        assert_eq!(
            parse_http_addr("[::1]:9000"),
            Ok("[::1]:9000".parse().unwrap())
        );
        assert!(parse_http_addr("nonsense").is_err());
        assert!(parse_http_addr("host:port").is_err());
    }
}
