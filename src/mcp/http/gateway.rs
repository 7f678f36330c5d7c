//! A gateway in front (agentgateway, ToolHive, an oauth2-proxy;
//! `--trusted-proxy`): it authenticates the users and names each request's
//! in an identity header, which is believed only from a peer that proves
//! itself — by a shared secret in `Toolpool-Proxy-Secret`, by connecting
//! from a named address or network, or both when both are given. A request
//! that does not is refused, whatever it names.

use std::net::IpAddr;
use std::path::Path;

use ipnet::IpNet;
use sha2::{Digest, Sha256};

use super::tokens::{check_token, constant_time_eq, Tenant};

/// The header a gateway proves itself with, under a secret.
pub(crate) const PROXY_SECRET_HEADER: &str = "toolpool-proxy-secret";

#[derive(Debug, Clone)]
pub(crate) struct Gateway {
    /// SHA-256 of the shared secret, when one is given.
    secret: Option<[u8; 32]>,
    /// The addresses and networks it may connect from (none: any).
    sources: Vec<IpNet>,
    /// The identity header's name, lowercase.
    identity: String,
}

impl Gateway {
    /// `values`, as `--trusted-proxy` gives them: each an address or
    /// network the gateway connects from, or a file whose first line is its
    /// secret (one at most); and the header that names the user.
    pub(crate) fn load(values: &[String], identity_header: &str) -> Result<Gateway, String> {
        let mut secret = None;
        let mut sources = Vec::new();
        for value in values {
            if let Some(net) = parse_source(value) {
                sources.push(net);
                continue;
            }
            if secret.is_some() {
                return Err(format!(
                    "--trusted-proxy {value}: a second secret file (give one, and addresses besides)"
                ));
            }
            secret = Some(read_secret(Path::new(value))?);
        }
        if secret.is_none() && sources.is_empty() {
            return Err("--trusted-proxy: give a secret file or an address".into());
        }
        let identity = identity_header.to_ascii_lowercase();
        if hyper::header::HeaderName::from_bytes(identity.as_bytes()).is_err() {
            return Err(format!(
                "--identity-header '{identity_header}' is not a header name"
            ));
        }
        Ok(Gateway {
            secret,
            sources,
            identity,
        })
    }

    /// The tenant a request from `peer` names, given its headers by
    /// `header`: only from the gateway, and a tenant-shaped name.
    pub(crate) fn tenant_of<'a>(
        &self,
        peer: Option<IpAddr>,
        header: &dyn Fn(&str) -> Option<&'a str>,
    ) -> Result<Tenant, String> {
        if let Some(secret) = &self.secret {
            let given = header(PROXY_SECRET_HEADER).unwrap_or("");
            let digest: [u8; 32] = Sha256::digest(given.trim().as_bytes()).into();
            if !constant_time_eq(&digest, secret) {
                return Err(format!(
                    "this server is reached through its gateway only (the {PROXY_SECRET_HEADER} header is missing or wrong)"
                ));
            }
        }
        if !self.sources.is_empty() {
            let from = peer.map(canonical);
            if !from.is_some_and(|ip| self.sources.iter().any(|net| net.contains(&ip))) {
                let from =
                    from.map_or_else(|| "an unknown address".to_string(), |ip| ip.to_string());
                return Err(format!(
                    "this server is reached through its gateway only (the request came from {from}, not a --trusted-proxy address)"
                ));
            }
        }
        let Some(name) = header(&self.identity) else {
            return Err(format!(
                "the gateway named no user (the {} header)",
                self.identity
            ));
        };
        Tenant::parse(name).map_err(|e| format!("the {} header: {e}", self.identity))
    }
}

/// An address (`10.0.0.5`, `::1`) or network (`10.0.0.0/8`).
fn parse_source(value: &str) -> Option<IpNet> {
    value
        .parse::<IpNet>()
        .ok()
        .or_else(|| value.parse::<IpAddr>().ok().map(IpNet::from))
}

/// An IPv4 peer on an IPv6 socket (`::ffff:10.0.0.5`) as the IPv4 address.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

fn read_secret(file: &Path) -> Result<[u8; 32], String> {
    let what = format!("--trusted-proxy {}", file.display());
    let text = std::fs::read_to_string(file).map_err(|e| {
        format!("{what}: cannot read it as a secret file, nor take it as an address: {e}")
    })?;
    let secret = text.lines().next().unwrap_or("").trim().to_string();
    let secret = check_token(secret, &format!("the secret in {}", file.display()))?;
    Ok(Sha256::digest(secret.as_bytes()).into())
}

#[cfg(test)]
mod tests {
    use super::super::tokens::tests::file;
    use super::*;

    type Headers = fn(&str) -> Option<&'static str>;

    const GOOD: Headers = |name| match name {
        PROXY_SECRET_HEADER => Some("gateway-secret-0123456789"),
        "x-forwarded-user" => Some("alice"),
        _ => None,
    };

    #[test]
    fn a_gateway_names_a_tenant_only_with_its_secret() {
        let f = file("gateway-secret-0123456789\n");
        let values = [f.path().display().to_string()];
        let gateway = Gateway::load(&values, "X-Forwarded-User").unwrap();
        assert_eq!(gateway.tenant_of(None, &GOOD), Ok(Tenant("alice".into())));
        let cases: [(Headers, &str); 4] = [
            (
                |n| (n == "x-forwarded-user").then_some("alice"),
                "through its gateway only",
            ),
            (
                |n| match n {
                    PROXY_SECRET_HEADER => Some("wrong-secret-0123456789ab"),
                    _ => Some("alice"),
                },
                "through its gateway only",
            ),
            (
                |n| (n == PROXY_SECRET_HEADER).then_some("gateway-secret-0123456789"),
                "named no user (the x-forwarded-user header)",
            ),
            (
                |n| match n {
                    PROXY_SECRET_HEADER => Some("gateway-secret-0123456789"),
                    _ => Some("../bob"),
                },
                "the x-forwarded-user header: name",
            ),
        ];
        for (headers, says) in cases {
            let error = gateway.tenant_of(None, &headers).unwrap_err();
            assert!(error.contains(says), "{error}");
        }
    }

    #[test]
    fn a_gateway_by_address_is_believed_from_its_networks_only() {
        let values = ["10.0.0.0/8".to_string(), "192.168.1.7".to_string()];
        let gateway = Gateway::load(&values, "x-forwarded-user").unwrap();
        let user: Headers = |n| (n == "x-forwarded-user").then_some("alice");
        for ok in ["10.1.2.3", "192.168.1.7", "::ffff:10.0.0.1"] {
            let peer = ok.parse().ok();
            assert_eq!(
                gateway.tenant_of(peer, &user),
                Ok(Tenant("alice".into())),
                "{ok}"
            );
        }
        for bad in ["192.168.1.8", "127.0.0.1", "::1"] {
            let error = gateway.tenant_of(bad.parse().ok(), &user).unwrap_err();
            assert!(error.contains(&format!("came from {bad}")), "{error}");
        }
        assert!(gateway.tenant_of(None, &user).is_err());
        // Both given: both must hold.
        let f = file("gateway-secret-0123456789\n");
        let both = Gateway::load(
            &["10.0.0.0/8".into(), f.path().display().to_string()],
            "x-forwarded-user",
        )
        .unwrap();
        assert!(both.tenant_of("10.0.0.1".parse().ok(), &user).is_err());
        assert!(both.tenant_of("10.0.0.1".parse().ok(), &GOOD).is_ok());
        assert!(both.tenant_of("11.0.0.1".parse().ok(), &GOOD).is_err());
    }

    #[test]
    fn bad_values_are_refused_naming_them() {
        let f = file("gateway-secret-0123456789\n");
        let path = f.path().display().to_string();
        for (values, says) in [
            (
                vec!["/no/such/file".to_string()],
                "cannot read it as a secret file, nor take it as an address",
            ),
            (vec![path.clone(), path.clone()], "a second secret file"),
            (vec![], "give a secret file or an address"),
        ] {
            let error = Gateway::load(&values, "x").unwrap_err();
            assert!(error.contains(says), "{error}");
        }
        let short = file("short\n");
        assert!(Gateway::load(&[short.path().display().to_string()], "x")
            .unwrap_err()
            .contains("too short"));
        assert!(Gateway::load(&[path], "bad header")
            .unwrap_err()
            .contains("not a header name"));
    }
}
