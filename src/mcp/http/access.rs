//! Who may use the streamable HTTP front end: the `Host` and `Origin` checks
//! (DNS rebinding: a web page on `attacker.example` whose name now resolves
//! to this machine must not reach the tools through a visitor's browser) and
//! bearer-token authentication.
//!
//! - `Host` must be a loopback name, an IP address (a rebound name always
//!   arrives as a name, never as an address) or a name given with
//!   `--allow-host`.
//! - `Origin`, when a browser sends one, must be a loopback origin
//!   (`http://localhost:*`, `http://127.0.0.1:*`, `http://[::1]:*`, also
//!   https) or one given with `--allow-origin`.
//! - With a token (`--auth-token-file`, or `TOOLPOOL_AUTH_TOKEN`), every
//!   request needs `Authorization: Bearer <token>`, compared in constant time.
//!   With `--auth-tokens FILE`, one of the file's tokens, which names the
//!   request's tenant ([`super::tokens`]). A non-loopback address needs a
//!   token unless `--no-auth` is given.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use sha2::{Digest, Sha256};

use super::tokens::{check_token, constant_time_eq, Tenant, TenantTokens};

/// The environment variable that holds the bearer token (when no
/// `--auth-token-file` is given).
pub const TOKEN_ENV: &str = "TOOLPOOL_AUTH_TOKEN";

/// The `serve --http` options beyond the address, as given (checked by
/// [`HttpOptions::new`]); [`Default`] is what the command line defaults to.
#[derive(Debug, Clone)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
pub struct HttpArgs {
    /// With --http: also accept browser requests from ORIGIN (scheme://host[:port]; loopback origins are always accepted); repeatable
    // The text is also the option's --help, where `[:port]` must stay as it is.
    #[allow(rustdoc::broken_intra_doc_links)]
    #[cfg_attr(
        feature = "cli",
        arg(long = "allow-origin", value_name = "ORIGIN", requires = "http")
    )]
    pub allow_origin: Vec<String>,
    /// With --http: also accept requests whose Host header names HOST (HOST or HOST:PORT; loopback names and IP addresses are always accepted); repeatable
    #[cfg_attr(
        feature = "cli",
        arg(long = "allow-host", value_name = "HOST", requires = "http")
    )]
    pub allow_host: Vec<String>,
    /// With --http: require `Authorization: Bearer <token>`, the token being FILE's first line (else TOOLPOOL_AUTH_TOKEN)
    #[cfg_attr(feature = "cli", arg(long, value_name = "FILE", requires = "http"))]
    pub auth_token_file: Option<PathBuf>,
    /// With --http: one `TENANT TOKEN` pair a line (`#` comments): a request's token names its tenant, whose sessions are its own; re-read on SIGHUP
    #[cfg_attr(
        feature = "cli",
        arg(
            long,
            value_name = "FILE",
            requires = "http",
            conflicts_with = "auth_token_file"
        )
    )]
    pub auth_tokens: Option<PathBuf>,
    /// With --http: serve a non-loopback address without a token (anyone who reaches it runs the tools)
    #[cfg_attr(
        feature = "cli",
        arg(long, requires = "http", conflicts_with_all = ["auth_token_file", "auth_tokens"])
    )]
    pub no_auth: bool,
    /// With --http: end a session after SECS without a message from or to its client
    #[cfg_attr(feature = "cli", arg(long, value_name = "SECS", default_value = "300", value_parser = crate::duration_text::parse_seconds))]
    pub session_idle: Duration,
    /// With --http: sessions open at once; an initialize past it is answered 503
    #[cfg_attr(feature = "cli", arg(long, value_name = "N", default_value = "256", value_parser = clap::value_parser!(u32).range(1..)))]
    pub max_sessions: u32,
    /// With --http: connections open at once; one past it is answered 503 and closed
    #[cfg_attr(feature = "cli", arg(long, value_name = "N", default_value = "512", value_parser = clap::value_parser!(u32).range(1..)))]
    pub max_connections: u32,
    /// With --http: the directory holding the session directories (workspace, attachments, packages), one per credential or session name [default: the directory holding --session-dir, .toolpool/sessions]
    #[cfg_attr(feature = "cli", arg(long, value_name = "DIR", requires = "http"))]
    pub sessions_root: Option<PathBuf>,
    /// With --http: remove a session directory nobody has used for SECS [default: 86400, a day]
    #[cfg_attr(feature = "cli", arg(long, value_name = "SECS", value_parser = crate::duration_text::parse_seconds, requires = "http"))]
    pub keep_sessions: Option<Duration>,
}

impl Default for HttpArgs {
    fn default() -> HttpArgs {
        HttpArgs {
            allow_origin: Vec::new(),
            allow_host: Vec::new(),
            auth_token_file: None,
            auth_tokens: None,
            no_auth: false,
            session_idle: Duration::from_secs(300),
            max_sessions: 256,
            max_connections: 512,
            sessions_root: None,
            keep_sessions: None,
        }
    }
}

/// How `serve --http` runs, checked before anything starts; made by
/// [`HttpOptions::new`] only, so what it holds was checked.
#[derive(Debug, Clone)]
pub struct HttpOptions {
    pub(crate) addr: SocketAddr,
    pub(crate) access: Access,
    pub(crate) session_idle: Duration,
    pub(crate) max_sessions: usize,
    pub(crate) max_connections: usize,
    /// `None`: the directory holding the pool's own session directory.
    pub(crate) sessions_root: Option<PathBuf>,
    pub(crate) keep_sessions: Duration,
}

impl HttpOptions {
    /// Checks the options: the origins and hosts must parse, the token
    /// (from `--auth-token-file`, else `token_env`) must be long enough, and
    /// a non-loopback address needs a token or `--no-auth`.
    pub fn new(
        addr: SocketAddr,
        args: &HttpArgs,
        token_env: Option<String>,
    ) -> Result<HttpOptions, String> {
        let origins = args
            .allow_origin
            .iter()
            .map(|text| {
                parse_origin(text).ok_or_else(|| {
                    format!("--allow-origin '{text}': give scheme://host[:port], e.g. https://app.example.com")
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let hosts = args
            .allow_host
            .iter()
            .map(|text| {
                parse_authority(text)
                    .map(|(host, port)| AllowedHost { host, port })
                    .ok_or_else(|| format!("--allow-host '{text}': give HOST or HOST:PORT"))
            })
            .collect::<Result<Vec<_>, _>>()?;
        if let Some(file) = &args.auth_tokens {
            let tokens = TenantTokens::load(file)?;
            return Ok(HttpOptions::checked(
                addr,
                args,
                Access {
                    origins,
                    hosts,
                    credentials: Credentials::Tenants(tokens),
                },
            ));
        }
        let token = match &args.auth_token_file {
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|e| {
                    format!("--auth-token-file {}: cannot read: {e}", path.display())
                })?;
                let token = text.lines().next().unwrap_or("").trim().to_string();
                Some(check_token(
                    token,
                    &format!("the token in {}", path.display()),
                )?)
            }
            None => match token_env {
                Some(token) => Some(check_token(token.trim().to_string(), TOKEN_ENV)?),
                None => None,
            },
        };
        if token.is_none() && !addr.ip().is_loopback() && !args.no_auth {
            return Err(format!(
                "--http {addr} is not a loopback address: anyone who reaches it could run every tool; \
                 give a token (--auth-token-file FILE or {TOKEN_ENV}), or --no-auth to serve it without one"
            ));
        }
        let credentials = match token {
            Some(token) => Credentials::One(Sha256::digest(token.as_bytes()).into()),
            None => Credentials::None,
        };
        Ok(HttpOptions::checked(
            addr,
            args,
            Access {
                origins,
                hosts,
                credentials,
            },
        ))
    }

    fn checked(addr: SocketAddr, args: &HttpArgs, access: Access) -> HttpOptions {
        HttpOptions {
            addr,
            access,
            session_idle: args.session_idle,
            max_sessions: args.max_sessions as usize,
            max_connections: args.max_connections as usize,
            sessions_root: args.sessions_root.clone(),
            keep_sessions: args
                .keep_sessions
                .unwrap_or(crate::context::sessions::DEFAULT_KEEP),
        }
    }
}

/// The request checks, in the order [`Access::check`] makes them.
#[derive(Debug, Clone, Default)]
pub(crate) struct Access {
    origins: Vec<Origin>,
    hosts: Vec<AllowedHost>,
    credentials: Credentials,
}

/// What a request must authenticate with.
#[derive(Debug, Clone, Default)]
enum Credentials {
    /// Nothing (a loopback address, or `--no-auth`).
    #[default]
    None,
    /// One token, as SHA-256: comparing digests takes the same time whatever
    /// the length or content of what a client sends.
    One([u8; 32]),
    /// One of `--auth-tokens`' tokens, which names the tenant.
    Tenants(TenantTokens),
}

/// Why a request is refused: the status and the text for the client.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// 403: the Host or Origin is not one this server answers.
    Forbidden(String),
    /// 401 with `WWW-Authenticate: Bearer`.
    Unauthorized { message: String, invalid: bool },
}

/// The request's authority (`Host`) and `Origin`, each from one header. A
/// request with two `Host` or two `Origin` headers is refused (which one a
/// check read would decide what it lets through), as is an absolute-form
/// target (`POST http://a.example/mcp`) that names another authority than
/// its `Host`; such a target without a `Host` gives the authority.
pub(crate) fn authority_and_origin<B>(
    request: &hyper::Request<B>,
) -> Result<(Option<&str>, Option<&str>), String> {
    let single = |name: hyper::header::HeaderName| {
        let mut values = request.headers().get_all(&name).iter();
        let first = values.next();
        let more = values.count();
        if more > 0 {
            return Err(format!(
                "the request has {} {name} headers; it may have one",
                more + 1
            ));
        }
        first
            .map(|v| {
                v.to_str()
                    .map_err(|_| format!("the {name} header is not text"))
            })
            .transpose()
    };
    let host = single(hyper::header::HOST)?;
    let origin = single(hyper::header::ORIGIN)?;
    let target = request.uri().authority().map(|a| a.as_str());
    match (host, target) {
        (Some(host), Some(target)) if !host.eq_ignore_ascii_case(target) => Err(format!(
            "the request target names '{target}' but its Host header names '{host}'"
        )),
        (host, target) => Ok((host.or(target), origin)),
    }
}

impl Access {
    pub(crate) fn requires_token(&self) -> bool {
        !matches!(self.credentials, Credentials::None)
    }

    /// The tenants' tokens, under `--auth-tokens` (re-read on SIGHUP).
    pub(crate) fn tenant_tokens(&self) -> Option<&TenantTokens> {
        match &self.credentials {
            Credentials::Tenants(tokens) => Some(tokens),
            _ => None,
        }
    }

    /// Host, then Origin, then the token; the tenant it names, under
    /// `--auth-tokens`.
    pub(crate) fn check(
        &self,
        host: Option<&str>,
        origin: Option<&str>,
        authorization: Option<&str>,
    ) -> Result<Option<Tenant>, Refusal> {
        self.check_host(host)?;
        self.check_origin(origin)?;
        self.check_token(authorization)
    }

    fn check_host(&self, host: Option<&str>) -> Result<(), Refusal> {
        let Some(text) = host else {
            return Err(Refusal::Forbidden(
                "the request has no Host header".to_string(),
            ));
        };
        let Some((name, port)) = parse_authority(text) else {
            return Err(Refusal::Forbidden(format!(
                "Host '{text}' is not a host name"
            )));
        };
        let allowed = is_loopback_name(&name)
            || name.trim_matches(['[', ']']).parse::<IpAddr>().is_ok()
            || self
                .hosts
                .iter()
                .any(|h| h.host == name && h.port.is_none_or(|p| Some(p) == port));
        if allowed {
            Ok(())
        } else {
            Err(Refusal::Forbidden(format!(
                "Host '{text}' is not served here (loopback names, IP addresses and --allow-host names are)"
            )))
        }
    }

    fn check_origin(&self, origin: Option<&str>) -> Result<(), Refusal> {
        // Requests that are not from a browser carry no Origin.
        let Some(text) = origin else {
            return Ok(());
        };
        let allowed = parse_origin(text).is_some_and(|origin| {
            (origin.scheme != "null" && is_loopback_name(&origin.host))
                || self.origins.contains(&origin)
        });
        if allowed {
            Ok(())
        } else {
            Err(Refusal::Forbidden(format!(
                "Origin '{text}' is not allowed (loopback origins and --allow-origin ones are)"
            )))
        }
    }

    fn check_token(&self, authorization: Option<&str>) -> Result<Option<Tenant>, Refusal> {
        if let Credentials::None = self.credentials {
            return Ok(None);
        }
        let Some(header) = authorization else {
            return Err(Refusal::Unauthorized {
                message: "this server needs `Authorization: Bearer <token>`".to_string(),
                invalid: false,
            });
        };
        let given = match header.split_once(' ') {
            Some((scheme, token)) if scheme.eq_ignore_ascii_case("bearer") => token.trim(),
            _ => {
                return Err(Refusal::Unauthorized {
                    message: "the Authorization header must be `Bearer <token>`".to_string(),
                    invalid: false,
                })
            }
        };
        let wrong = || Refusal::Unauthorized {
            message: "the bearer token is wrong".to_string(),
            invalid: true,
        };
        match &self.credentials {
            Credentials::None => Ok(None),
            Credentials::One(expected) => {
                let given: [u8; 32] = Sha256::digest(given.as_bytes()).into();
                match constant_time_eq(&given, expected) {
                    true => Ok(None),
                    false => Err(wrong()),
                }
            }
            Credentials::Tenants(tokens) => tokens.tenant_of(given).map(Some).ok_or_else(wrong),
        }
    }
}

#[derive(Debug, Clone)]
struct AllowedHost {
    host: String,
    port: Option<u16>,
}

/// An origin as RFC 6454 compares them: scheme, host, port (the scheme's
/// default filled in); or `null`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Origin {
    scheme: String,
    host: String,
    port: Option<u16>,
}

fn parse_origin(text: &str) -> Option<Origin> {
    let text = text.trim();
    if text == "null" {
        return Some(Origin {
            scheme: "null".into(),
            host: String::new(),
            port: None,
        });
    }
    let (scheme, rest) = text.split_once("://")?;
    let scheme = scheme.to_ascii_lowercase();
    let default_port = match scheme.as_str() {
        "http" => 80,
        "https" => 443,
        _ => return None,
    };
    let rest = rest.strip_suffix('/').unwrap_or(rest);
    if rest.contains(['/', '?', '#', '@']) {
        return None;
    }
    let (host, port) = parse_authority(rest)?;
    Some(Origin {
        scheme,
        host,
        port: Some(port.unwrap_or(default_port)),
    })
}

/// `host`, `host:port`, `[v6]`, `[v6]:port`; the host lowercased, IPv6 in
/// brackets.
fn parse_authority(text: &str) -> Option<(String, Option<u16>)> {
    let text = text.trim();
    let (host, port) = if let Some(rest) = text.strip_prefix('[') {
        let (v6, after) = rest.split_once(']')?;
        v6.parse::<std::net::Ipv6Addr>().ok()?;
        let port = match after {
            "" => None,
            _ => Some(after.strip_prefix(':')?.parse::<u16>().ok()?),
        };
        (format!("[{v6}]"), port)
    } else {
        match text.rsplit_once(':') {
            Some((host, port)) => (host.to_string(), Some(port.parse::<u16>().ok()?)),
            None => (text.to_string(), None),
        }
    };
    let host = host.to_ascii_lowercase();
    let name_ok = host.starts_with('[')
        || (!host.is_empty()
            && host
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.'));
    name_ok.then_some((host, port))
}

/// A `Host` header value (`host[:port]`) that names a loopback host.
#[cfg(feature = "metrics")]
pub(crate) fn is_loopback_host(text: &str) -> bool {
    parse_authority(text).is_some_and(|(host, _)| is_loopback_name(&host))
}

fn is_loopback_name(host: &str) -> bool {
    host == "localhost"
        || host.ends_with(".localhost")
        || host
            .trim_matches(['[', ']'])
            .parse::<IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn access(origins: &[&str], hosts: &[&str], token: Option<&str>) -> Access {
        let args = HttpArgs {
            allow_origin: origins.iter().map(|s| s.to_string()).collect(),
            allow_host: hosts.iter().map(|s| s.to_string()).collect(),
            auth_token_file: None,
            auth_tokens: None,
            no_auth: false,
            session_idle: Duration::from_secs(1),
            max_sessions: 1,
            max_connections: 1,
            sessions_root: None,
            keep_sessions: None,
        };
        let addr = "127.0.0.1:1".parse().unwrap();
        HttpOptions::new(addr, &args, token.map(str::to_string))
            .unwrap()
            .access
    }

    #[test]
    fn hosts_loopback_addresses_and_allowed_names() {
        let a = access(&[], &["mcp.example.com", "other.example:8443"], None);
        for ok in [
            "localhost:8080",
            "127.0.0.1:1",
            "[::1]:9",
            "10.1.2.3:80",
            "[2001:db8::1]",
            "MCP.example.com",
            "other.example:8443",
        ] {
            assert_eq!(a.check(Some(ok), None, None), Ok(None), "{ok}");
        }
        for bad in [
            "attacker.example:8080",
            "other.example:80",
            "localhost.attacker.example",
            "",
            "a b",
        ] {
            assert!(
                matches!(a.check(Some(bad), None, None), Err(Refusal::Forbidden(_))),
                "{bad}"
            );
        }
        assert!(a.check(None, None, None).is_err());
    }

    #[test]
    fn origins_loopback_by_default_and_allowed_ones() {
        let a = access(&["https://app.example.com"], &[], None);
        for ok in [
            "http://localhost:3000",
            "http://127.0.0.1:8080",
            "https://[::1]",
            "https://app.example.com",
            "https://app.example.com:443",
        ] {
            assert_eq!(a.check(Some("localhost"), Some(ok), None), Ok(None), "{ok}");
        }
        for bad in [
            "http://evil.example",
            "http://app.example.com",
            "https://app.example.com:8443",
            "null",
            "file://",
            "http://localhost.evil.example",
        ] {
            assert!(
                a.check(Some("localhost"), Some(bad), None).is_err(),
                "{bad}"
            );
        }
        assert!(parse_origin("https://x.example/path").is_none());
    }

    #[test]
    fn bearer_token() {
        let token = "s3cret-token-0123456789";
        let a = access(&[], &[], Some(token));
        let ok = format!("Bearer {token}");
        assert_eq!(a.check(Some("localhost"), None, Some(&ok)), Ok(None));
        let lower = format!("bearer {token}");
        assert_eq!(a.check(Some("localhost"), None, Some(&lower)), Ok(None));
        for bad in [
            None,
            Some("Bearer wrong"),
            Some("Basic dXNlcjpwYXNz"),
            Some(token),
        ] {
            assert!(
                matches!(
                    a.check(Some("localhost"), None, bad),
                    Err(Refusal::Unauthorized { .. })
                ),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn non_loopback_needs_a_token_or_no_auth() {
        let mut args = HttpArgs {
            allow_origin: vec![],
            allow_host: vec![],
            auth_token_file: None,
            auth_tokens: None,
            no_auth: false,
            session_idle: Duration::from_secs(1),
            max_sessions: 1,
            max_connections: 1,
            sessions_root: None,
            keep_sessions: None,
        };
        let public = "0.0.0.0:8080".parse().unwrap();
        let error = HttpOptions::new(public, &args, None).unwrap_err();
        assert!(error.contains("--no-auth"), "{error}");
        let short = HttpOptions::new(public, &args, Some("short".into())).unwrap_err();
        assert!(short.contains("at least 16"), "{short}");
        assert!(HttpOptions::new(public, &args, Some("x".repeat(32))).is_ok());
        args.no_auth = true;
        assert!(HttpOptions::new(public, &args, None).is_ok());
    }
}
