//! Under `--jwks`, this server is an OAuth 2.1 protected resource (MCP's
//! authorization specification): it publishes its metadata (RFC 9728) at
//! `/.well-known/oauth-protected-resource`, also under the endpoint's path
//! (`…/oauth-protected-resource/mcp`, where RFC 9728 puts the metadata of
//! the resource `https://host/mcp`), without a token; and a 401 or 403 names
//! that document in `WWW-Authenticate` (`resource_metadata`), with the
//! RFC 6750 error and, for a missing scope, the scopes needed.
//!
//! The resource is `--audience` when it is an http(s) URL (RFC 8707 has the
//! audience name the resource); otherwise the endpoint's URL on the
//! request's `Host`, `https` unless the host is a loopback one (TLS is ended
//! by the proxy in front).

use hyper::header::{HeaderValue, WWW_AUTHENTICATE};
use hyper::{Response, StatusCode};

use super::access::Refusal;
use super::jwt::JwtCheck;
use super::requests::{text, Body};
use super::ENDPOINT;

/// Where the metadata is served (and, with the endpoint's path after it,
/// the same document).
pub(super) const METADATA_PATH: &str = "/.well-known/oauth-protected-resource";

/// Whether `path` asks for the metadata.
pub(super) fn is_metadata_path(path: &str) -> bool {
    path == METADATA_PATH || path.strip_prefix(METADATA_PATH) == Some(ENDPOINT)
}

/// The resource's identifier: `--audience` if it is a URL, else the
/// endpoint on `host`.
fn resource(check: &JwtCheck, host: Option<&str>) -> String {
    let audience = &check.audience;
    if audience.starts_with("https://") || audience.starts_with("http://") {
        return audience.clone();
    }
    let host = host.unwrap_or("localhost");
    let loopback = super::access::is_loopback_host(host);
    let scheme = if loopback { "http" } else { "https" };
    format!("{scheme}://{host}{ENDPOINT}")
}

/// The metadata document's URL for the resource.
fn metadata_url(check: &JwtCheck, host: Option<&str>) -> String {
    let resource = resource(check, host);
    // RFC 9728 §3.1: the well-known path goes between the host and the path.
    match resource.split_once("://") {
        Some((scheme, rest)) => {
            let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
            let path = path.trim_end_matches('/');
            let tail = if path.is_empty() {
                String::new()
            } else {
                format!("/{path}")
            };
            format!("{scheme}://{authority}{METADATA_PATH}{tail}")
        }
        None => format!("{resource}{METADATA_PATH}"),
    }
}

/// The RFC 9728 document.
pub(super) fn metadata(check: &JwtCheck, host: Option<&str>) -> Response<Body> {
    let document = serde_json::json!({
        "resource": resource(check, host),
        "authorization_servers": [check.issuer],
        "bearer_methods_supported": ["header"],
        "scopes_supported": check.required_scopes(),
        "resource_signing_alg_values_supported": ["RS256", "ES256", "EdDSA"],
        "resource_name": "toolpool",
    });
    let mut response = text(StatusCode::OK, format!("{document}\n"));
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// The answer to a refused request: 403 for a Host, Origin or scope, 401
/// for a credential, with the challenge (naming the metadata under
/// `--jwks`).
pub(super) fn refused(refusal: Refusal, jwt: Option<(&JwtCheck, Option<&str>)>) -> Response<Body> {
    let metadata = jwt.map(|(check, host)| metadata_url(check, host));
    let challenge = |params: Vec<(&str, String)>| {
        let mut text = String::from("Bearer ");
        let mut all = vec![("realm", "toolpool".to_string())];
        all.extend(params);
        if let Some(url) = &metadata {
            all.push(("resource_metadata", url.clone()));
        }
        let quoted: Vec<String> = all
            .iter()
            .map(|(name, value)| format!("{name}=\"{}\"", value.replace(['"', '\\'], "'")))
            .collect();
        text.push_str(&quoted.join(", "));
        HeaderValue::from_str(&text).unwrap_or(HeaderValue::from_static("Bearer"))
    };
    let (status, message, header) = match refusal {
        Refusal::Forbidden(message) => {
            tracing::warn!("refused a request: {message}");
            return text(StatusCode::FORBIDDEN, format!("forbidden: {message}\n"));
        }
        Refusal::Unauthorized { message, invalid } => {
            let params = match invalid {
                true => vec![
                    ("error", "invalid_token".to_string()),
                    ("error_description", message.clone()),
                ],
                false => Vec::new(),
            };
            (
                StatusCode::UNAUTHORIZED,
                format!("unauthorized: {message}"),
                challenge(params),
            )
        }
        Refusal::UnknownKey(kid) => {
            let message = format!("the token names a key (kid {kid:?}) the key set does not hold");
            let params = vec![
                ("error", "invalid_token".to_string()),
                ("error_description", message.clone()),
            ];
            (
                StatusCode::UNAUTHORIZED,
                format!("unauthorized: {message}"),
                challenge(params),
            )
        }
        Refusal::InsufficientScope(missing) => {
            let scopes = missing.join(" ");
            let message = format!("the token lacks the scope {scopes:?}");
            let params = vec![
                ("error", "insufficient_scope".to_string()),
                ("scope", scopes),
                ("error_description", message.clone()),
            ];
            (
                StatusCode::FORBIDDEN,
                format!("forbidden: {message}"),
                challenge(params),
            )
        }
    };
    tracing::info!("refused a request: {message}");
    let mut response = text(status, format!("{message}\n"));
    response.headers_mut().insert(WWW_AUTHENTICATE, header);
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_metadata_url_sits_between_host_and_path() {
        let check = |audience: &str| {
            let file = super::super::tokens::tests::file(r#"{"keys": []}"#);
            JwtCheck::new(
                &file.path().display().to_string(),
                Some("https://issuer.example"),
                Some(audience),
                &["tools".to_string()],
                "sub",
            )
            .unwrap()
        };
        let url = check("https://mcp.example.com/mcp");
        assert_eq!(
            metadata_url(&url, Some("ignored")),
            "https://mcp.example.com/.well-known/oauth-protected-resource/mcp"
        );
        let name = check("toolpool-api");
        assert_eq!(
            metadata_url(&name, Some("mcp.example.com")),
            "https://mcp.example.com/.well-known/oauth-protected-resource/mcp"
        );
        assert_eq!(
            metadata_url(&name, Some("127.0.0.1:8080")),
            "http://127.0.0.1:8080/.well-known/oauth-protected-resource/mcp"
        );
        assert!(is_metadata_path("/.well-known/oauth-protected-resource"));
        assert!(is_metadata_path(
            "/.well-known/oauth-protected-resource/mcp"
        ));
        assert!(!is_metadata_path("/.well-known/oauth-protected-resource/x"));
    }
}
