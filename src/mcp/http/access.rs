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

use std::net::IpAddr;

use sha2::{Digest, Sha256};

use super::gateway::Gateway;
use super::jwt::{JwtCheck, JwtRefusal};
use super::tokens::{constant_time_eq, Tenant, TenantTokens};

/// The request checks, in the order [`Access::check`] makes them.
#[derive(Debug, Clone, Default)]
pub(crate) struct Access {
    origins: Vec<Origin>,
    hosts: Vec<AllowedHost>,
    credentials: Credentials,
}

/// What a request must authenticate with.
#[derive(Debug, Clone, Default)]
pub(super) enum Credentials {
    /// Nothing (a loopback address, or `--no-auth`).
    #[default]
    None,
    /// One token, as SHA-256: comparing digests takes the same time whatever
    /// the length or content of what a client sends.
    One([u8; 32]),
    /// One of `--auth-tokens`' tokens, which names the tenant.
    Tenants(TenantTokens),
    /// A gateway, and the user it names (`--trusted-proxy`).
    Gateway(Gateway),
    /// An OAuth access token, a JWT whose claim names the tenant (`--jwks`).
    Jwt(Box<JwtCheck>),
}

/// Why a request is refused: the status and the text for the client.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// 403: the Host or Origin is not one this server answers.
    Forbidden(String),
    /// 401 with `WWW-Authenticate: Bearer`.
    Unauthorized { message: String, invalid: bool },
    /// 401 until the JWKS is fetched again: the token names a key not held.
    UnknownKey(String),
    /// 403 `insufficient_scope`: the token lacks these scopes.
    InsufficientScope(Vec<String>),
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
    /// The checks of `--allow-origin` and `--allow-host` values (each must
    /// parse) and of `credentials`.
    pub(super) fn new(
        allow_origin: &[String],
        allow_host: &[String],
        credentials: Credentials,
    ) -> Result<Access, String> {
        let origins = allow_origin
            .iter()
            .map(|text| {
                parse_origin(text).ok_or_else(|| {
                    format!("--allow-origin '{text}': give scheme://host[:port], e.g. https://app.example.com")
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let hosts = allow_host
            .iter()
            .map(|text| {
                parse_authority(text)
                    .map(|(host, port)| AllowedHost { host, port })
                    .ok_or_else(|| format!("--allow-host '{text}': give HOST or HOST:PORT"))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Access {
            origins,
            hosts,
            credentials,
        })
    }

    pub(crate) fn requires_token(&self) -> bool {
        !matches!(self.credentials, Credentials::None)
    }

    /// Whether the credentials name a tenant.
    pub(crate) fn has_tenants(&self) -> bool {
        matches!(
            self.credentials,
            Credentials::Tenants(_) | Credentials::Gateway(_) | Credentials::Jwt(_)
        )
    }

    /// The access-token check, under `--jwks`.
    pub(crate) fn jwt(&self) -> Option<&JwtCheck> {
        match &self.credentials {
            Credentials::Jwt(check) => Some(check),
            _ => None,
        }
    }

    /// The tenants' tokens, under `--auth-tokens` (re-read on SIGHUP).
    pub(crate) fn tenant_tokens(&self) -> Option<&TenantTokens> {
        match &self.credentials {
            Credentials::Tenants(tokens) => Some(tokens),
            _ => None,
        }
    }

    /// Host, then Origin, then the token (or the gateway); the tenant it
    /// names, with tenants. `header` gives the request's headers by
    /// lowercase name; `peer` is the address it came from.
    pub(crate) fn check<'a>(
        &self,
        (host, origin): (Option<&str>, Option<&str>),
        peer: Option<IpAddr>,
        header: &dyn Fn(&str) -> Option<&'a str>,
    ) -> Result<Option<Tenant>, Refusal> {
        self.check_host_and_origin((host, origin))?;
        if let Credentials::Gateway(gateway) = &self.credentials {
            return gateway
                .tenant_of(peer, header)
                .map(Some)
                .map_err(|message| Refusal::Unauthorized {
                    message,
                    invalid: true,
                });
        }
        self.check_token(header("authorization"))
    }

    /// Host, then Origin: what even a request that needs no token passes.
    pub(crate) fn check_host_and_origin(
        &self,
        (host, origin): (Option<&str>, Option<&str>),
    ) -> Result<(), Refusal> {
        self.check_host(host)?;
        self.check_origin(origin)
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
            Credentials::None | Credentials::Gateway(_) => Ok(None),
            Credentials::One(expected) => {
                let given: [u8; 32] = Sha256::digest(given.as_bytes()).into();
                match constant_time_eq(&given, expected) {
                    true => Ok(None),
                    false => Err(wrong()),
                }
            }
            Credentials::Tenants(tokens) => tokens.tenant_of(given).map(Some).ok_or_else(wrong),
            Credentials::Jwt(check) => match check.tenant_of(given) {
                Ok(tenant) => Ok(Some(tenant)),
                Err(JwtRefusal::Invalid(message)) => Err(Refusal::Unauthorized {
                    message,
                    invalid: true,
                }),
                Err(JwtRefusal::UnknownKey(kid)) => Err(Refusal::UnknownKey(kid)),
                Err(JwtRefusal::Scope(missing)) => Err(Refusal::InsufficientScope(missing)),
            },
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
    use super::super::options::{HttpArgs, HttpOptions};
    use super::*;

    /// The headers of a request whose `Authorization` is `value`.
    fn auth<'a>(value: Option<&'a str>) -> impl Fn(&str) -> Option<&'a str> {
        move |name| (name == "authorization").then_some(value).flatten()
    }

    fn access(origins: &[&str], hosts: &[&str], token: Option<&str>) -> Access {
        let args = HttpArgs {
            allow_origin: origins.iter().map(|s| s.to_string()).collect(),
            allow_host: hosts.iter().map(|s| s.to_string()).collect(),
            ..HttpArgs::default()
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
            assert_eq!(
                a.check((Some(ok), None), None, &auth(None)),
                Ok(None),
                "{ok}"
            );
        }
        for bad in [
            "attacker.example:8080",
            "other.example:80",
            "localhost.attacker.example",
            "",
            "a b",
        ] {
            assert!(
                matches!(
                    a.check((Some(bad), None), None, &auth(None)),
                    Err(Refusal::Forbidden(_))
                ),
                "{bad}"
            );
        }
        assert!(a.check((None, None), None, &auth(None)).is_err());
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
            assert_eq!(
                a.check((Some("localhost"), Some(ok)), None, &auth(None)),
                Ok(None),
                "{ok}"
            );
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
                a.check((Some("localhost"), Some(bad)), None, &auth(None))
                    .is_err(),
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
        assert_eq!(
            a.check((Some("localhost"), None), None, &auth(Some(&ok))),
            Ok(None)
        );
        let lower = format!("bearer {token}");
        assert_eq!(
            a.check((Some("localhost"), None), None, &auth(Some(&lower))),
            Ok(None)
        );
        for bad in [
            None,
            Some("Bearer wrong"),
            Some("Basic dXNlcjpwYXNz"),
            Some(token),
        ] {
            assert!(
                matches!(
                    a.check((Some("localhost"), None), None, &auth(bad)),
                    Err(Refusal::Unauthorized { .. })
                ),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn non_loopback_needs_a_token_or_no_auth() {
        let mut args = HttpArgs::default();
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
