//! The `serve --http` options: as given on the command line
//! ([`HttpArgs`]), and checked before anything starts ([`HttpOptions`]).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use sha2::{Digest, Sha256};

use super::access::{Access, Credentials};
use super::gateway::Gateway;
use super::jwt::JwtCheck;
use super::tenant_limits::TenantLimits;
use super::tokens::{check_token, TenantTokens};
use crate::mcp::replicas::Replica;

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
    /// With --http: a gateway in front authenticates the users, and the identity header names each request's tenant; believed only from the gateway: a file holding its shared secret (sent in `Toolpool-Proxy-Secret`), or an address or network it connects from; repeatable (both kinds given: both must hold)
    #[cfg_attr(
        feature = "cli",
        arg(long, value_name = "FILE|ADDR", requires = "http", conflicts_with_all = ["auth_token_file", "auth_tokens"])
    )]
    pub trusted_proxy: Vec<String>,
    /// With --trusted-proxy: the header in which the gateway names the user (its tenant)
    #[cfg_attr(
        feature = "cli",
        arg(
            long,
            value_name = "NAME",
            default_value = "x-forwarded-user",
            requires = "trusted_proxy"
        )
    )]
    pub identity_header: String,
    /// With --http: OAuth 2.1 access tokens: each request's bearer token is a JWT (RS256, ES256 or EdDSA) checked against the JSON Web Key Set in FILE or at an http(s):// URL (fetched again for a key it lacks); its claim (--tenant-claim) names the tenant
    #[cfg_attr(
        feature = "cli",
        arg(long, value_name = "FILE|URL", requires_all = ["http", "issuer", "audience"], conflicts_with_all = ["auth_token_file", "auth_tokens", "trusted_proxy"])
    )]
    pub jwks: Option<String>,
    /// With --jwks: the authorization server a token's `iss` must name
    #[cfg_attr(feature = "cli", arg(long, value_name = "URL", requires = "jwks"))]
    pub issuer: Option<String>,
    /// With --jwks: this server, as a token's `aud` must name it (RFC 8707), e.g. https://mcp.example.com/mcp
    #[cfg_attr(feature = "cli", arg(long, value_name = "URI", requires = "jwks"))]
    pub audience: Option<String>,
    /// With --jwks: a scope every token must hold (in `scope` or `scp`), else 403 insufficient_scope; repeatable
    #[cfg_attr(feature = "cli", arg(long, value_name = "SCOPE", requires = "jwks"))]
    pub required_scope: Vec<String>,
    /// With --jwks: the claim that names a token's tenant
    #[cfg_attr(
        feature = "cli",
        arg(long, value_name = "CLAIM", default_value = "sub", requires = "jwks")
    )]
    pub tenant_claim: String,
    /// With tenants (--auth-tokens, --trusted-proxy, --jwks): a tenant's `tools/call` requests in flight at once; one past it is answered 429 with Retry-After
    #[cfg_attr(feature = "cli", arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..)))]
    pub tenant_max_calls: Option<u32>,
    /// With tenants (--auth-tokens, --trusted-proxy, --jwks): the `tools/call` requests a tenant may start a second, on average (bursts of as many); past it 429 with Retry-After
    #[cfg_attr(feature = "cli", arg(long, value_name = "RATE"))]
    pub tenant_calls_per_second: Option<f64>,
    /// With --http: one of several replicas behind one balancer: the ids of its tasks and questions name it, sealed with the cluster's secret (FILE's first line, at least 32 characters, the same on every replica), and a replica that gets a request for another's forwards it there
    #[cfg_attr(
        feature = "cli",
        arg(long, value_name = "FILE", requires_all = ["http", "advertise"])
    )]
    pub cluster_secret: Option<PathBuf>,
    /// With --cluster-secret: HOST:PORT, where the other replicas reach this one (in Kubernetes, the pod's IP: `$(POD_IP):8080`)
    #[cfg_attr(
        feature = "cli",
        arg(long, value_name = "HOST:PORT", requires = "cluster_secret")
    )]
    pub advertise: Option<String>,
    /// With --http: serve a non-loopback address without a token (anyone who reaches it runs the tools)
    #[cfg_attr(
        feature = "cli",
        arg(long, requires = "http", conflicts_with_all = ["auth_token_file", "auth_tokens", "trusted_proxy", "jwks"])
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
            trusted_proxy: Vec::new(),
            identity_header: "x-forwarded-user".to_string(),
            jwks: None,
            issuer: None,
            audience: None,
            required_scope: Vec::new(),
            tenant_claim: "sub".to_string(),
            cluster_secret: None,
            advertise: None,
            tenant_max_calls: None,
            tenant_calls_per_second: None,
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
    /// `--tenant-max-calls`, `--tenant-calls-per-second`.
    pub(crate) tenant_limits: Option<Arc<TenantLimits>>,
    /// `--cluster-secret`, `--advertise`.
    pub(crate) replica: Option<Replica>,
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
        let tenants = match (&args.auth_tokens, &args.jwks, args.trusted_proxy.is_empty()) {
            (Some(file), _, _) => Some(Credentials::Tenants(TenantTokens::load(file)?)),
            (None, Some(jwks), _) => Some(Credentials::Jwt(Box::new(JwtCheck::new(
                jwks,
                args.issuer.as_deref(),
                args.audience.as_deref(),
                &args.required_scope,
                &args.tenant_claim,
            )?))),
            (None, None, false) => Some(Credentials::Gateway(Gateway::load(
                &args.trusted_proxy,
                &args.identity_header,
            )?)),
            (None, None, true) => None,
        };
        let limited = args.tenant_max_calls.is_some() || args.tenant_calls_per_second.is_some();
        if let Some(rate) = args.tenant_calls_per_second {
            if !(rate.is_finite() && rate > 0.0) {
                return Err(format!(
                    "--tenant-calls-per-second {rate}: give a number of calls above 0"
                ));
            }
        }
        let replica = match (&args.cluster_secret, &args.advertise) {
            (Some(secret), Some(address)) => Some(Replica::new(secret, address)?),
            (None, None) => None,
            _ => return Err("--cluster-secret and --advertise go together".into()),
        };
        if let Some(credentials) = tenants {
            let access = Access::new(&args.allow_origin, &args.allow_host, credentials)?;
            return Ok(HttpOptions::checked(addr, args, access, replica));
        }
        if limited {
            return Err(
                "--tenant-max-calls and --tenant-calls-per-second need tenants: give --auth-tokens FILE, --jwks or --trusted-proxy"
                    .into(),
            );
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
            Access::new(&args.allow_origin, &args.allow_host, credentials)?,
            replica,
        ))
    }

    /// Whether each request names a tenant (`--auth-tokens`,
    /// `--trusted-proxy`, `--jwks`).
    pub fn has_tenants(&self) -> bool {
        self.access.has_tenants()
    }

    fn checked(
        addr: SocketAddr,
        args: &HttpArgs,
        access: Access,
        replica: Option<Replica>,
    ) -> HttpOptions {
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
            tenant_limits: TenantLimits::new(
                args.tenant_max_calls.map(|n| n as usize),
                args.tenant_calls_per_second,
            ),
            replica,
        }
    }
}
