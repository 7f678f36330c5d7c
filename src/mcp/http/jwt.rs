//! OAuth 2.1 access tokens (`--jwks`): the server is a resource server, as
//! MCP's authorization specification has it. A request's bearer token is a
//! JWT signed by the authorization server, whose public keys are a JWKS read
//! from a file or fetched from an `http(s)://` URL, and fetched again when a
//! token names a key it does not hold (at most once every
//! [`MIN_REFRESH`]: a flood of made-up key ids cannot hammer the issuer).
//!
//! A token is accepted when, in this order: it is at most [`MAX_TOKEN`]
//! bytes; its `alg` is RS256, ES256 or EdDSA (`none`, HMAC and everything
//! else are refused before any key is looked at, so a public key can never
//! serve as an HMAC secret); its `kid` names a key of the set; the signature
//! holds (jsonwebtoken, on aws-lc-rs: no cryptography is written here);
//! `exp` is in the future and `nbf` and `iat` in the past, within [`LEEWAY`];
//! `iss` is `--issuer`; `aud` names `--audience` (RFC 8707); `scope` holds
//! every `--required-scope`. The tenant is `sub`, or the claim
//! `--tenant-claim` names, and must be a tenant-shaped word.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use base64::Engine;
use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use sha2::{Digest, Sha256};

use super::tokens::Tenant;

/// The longest token read: a JWT of a few claims is well under 2 KiB.
pub(super) const MAX_TOKEN: usize = 8 * 1024;
/// How far `exp`, `nbf` and `iat` may be off, for clocks a little apart.
pub(super) const LEEWAY: Duration = Duration::from_secs(30);
/// The least time between two fetches of the key set.
const MIN_REFRESH: Duration = Duration::from_secs(3);
/// The largest key set read.
const MAX_JWKS: usize = 1 << 20;
/// Tokens remembered as verified; past it the memory starts over.
const MAX_VERIFIED: usize = 10_000;
/// How long a fetch of the key set may take.
const FETCH_TIMEOUT: Duration = Duration::from_secs(10);

/// The signature algorithms accepted, by their `alg` names.
const ACCEPTED: [(&str, Algorithm); 3] = [
    ("RS256", Algorithm::RS256),
    ("ES256", Algorithm::ES256),
    ("EdDSA", Algorithm::EdDSA),
];

/// Tokens that passed, by SHA-256: their tenant and `exp`.
type Verified = HashMap<[u8; 32], (Tenant, u64)>;

/// Where the key set comes from.
#[derive(Debug, Clone)]
enum Source {
    File(PathBuf),
    Url(hyper::Uri),
}

/// The keys of the set by `kid`.
type Keys = HashMap<String, Arc<DecodingKey>>;

/// The access-token check of `--jwks`.
#[derive(Clone)]
pub(crate) struct JwtCheck {
    source: Source,
    keys: Arc<RwLock<Arc<Keys>>>,
    /// When the set was last fetched; held while fetching, so that
    /// refreshes asked for at once make one fetch.
    fetched: Arc<tokio::sync::Mutex<Option<Instant>>>,
    validation: Validation,
    /// Tokens that passed, by SHA-256, with their tenant and `exp`: a
    /// client sends the same token until it expires, and its signature need
    /// not be checked at each request.
    verified: Arc<Mutex<Verified>>,
    required_scopes: Vec<String>,
    tenant_claim: String,
    pub(super) issuer: String,
    pub(super) audience: String,
}

impl std::fmt::Debug for JwtCheck {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JwtCheck")
            .field("source", &self.source)
            .field("issuer", &self.issuer)
            .field("audience", &self.audience)
            .finish_non_exhaustive()
    }
}

/// Why a token is refused.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum JwtRefusal {
    /// 401 `invalid_token`: the text says what is wrong.
    Invalid(String),
    /// 401, until the key set is fetched again: no key has this id.
    UnknownKey(String),
    /// 403 `insufficient_scope`: the scopes it lacks.
    Scope(Vec<String>),
}

impl JwtCheck {
    /// Checks the options; a file must hold a key set now, a URL is
    /// fetched at the first token (the issuer may start after this server).
    /// `jwks`, `issuer`, `audience`, `required_scopes`, `tenant_claim`: the
    /// options of the same names.
    pub(crate) fn new(
        jwks: &str,
        issuer: Option<&str>,
        audience: Option<&str>,
        required_scopes: &[String],
        tenant_claim: &str,
    ) -> Result<JwtCheck, String> {
        let source = match jwks.parse::<hyper::Uri>() {
            Ok(uri) if matches!(uri.scheme_str(), Some("http" | "https")) => Source::Url(uri),
            _ => Source::File(PathBuf::from(jwks)),
        };
        let (Some(issuer), Some(audience)) = (issuer, audience) else {
            return Err(
                "--jwks needs --issuer and --audience (a token's iss and aud must name them)"
                    .into(),
            );
        };
        let (issuer, audience) = (issuer.trim().to_string(), audience.trim().to_string());
        if issuer.is_empty() || audience.is_empty() {
            return Err("--issuer and --audience must not be empty".into());
        }
        let mut validation = Validation::new(Algorithm::RS256);
        validation.leeway = LEEWAY.as_secs();
        validation.validate_nbf = true;
        validation.set_issuer(&[&issuer]);
        validation.set_audience(&[&audience]);
        validation.set_required_spec_claims(&["exp", "iss", "aud"]);
        let keys = match &source {
            Source::File(path) => parse_set(
                &std::fs::read(path)
                    .map_err(|e| format!("--jwks {}: cannot read: {e}", path.display()))?,
            )
            .map_err(|e| format!("--jwks {}: {e}", path.display()))?,
            Source::Url(_) => Keys::new(),
        };
        Ok(JwtCheck {
            fetched: Arc::new(tokio::sync::Mutex::new(
                matches!(source, Source::File(_)).then(Instant::now),
            )),
            source,
            keys: Arc::new(RwLock::new(Arc::new(keys))),
            validation,
            verified: Arc::default(),
            required_scopes: required_scopes.to_vec(),
            tenant_claim: tenant_claim.to_string(),
            issuer,
            audience,
        })
    }

    /// The scopes every token must hold.
    pub(super) fn required_scopes(&self) -> &[String] {
        &self.required_scopes
    }

    /// The tenant `token` names, if it passes every check (or passed them
    /// before and has not expired since).
    pub(crate) fn tenant_of(&self, token: &str) -> Result<Tenant, JwtRefusal> {
        if token.len() > MAX_TOKEN {
            return Err(JwtRefusal::Invalid(format!(
                "the token has {} bytes; at most {MAX_TOKEN} are read",
                token.len()
            )));
        }
        let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        let now = jsonwebtoken::get_current_timestamp();
        let mut verified = self.verified.lock().unwrap_or_else(|e| e.into_inner());
        match verified.get(&digest) {
            Some((tenant, exp)) if now <= exp.saturating_add(LEEWAY.as_secs()) => {
                return Ok(tenant.clone())
            }
            Some(_) => {
                verified.remove(&digest);
            }
            None => {}
        }
        drop(verified);
        let (tenant, exp) = self.verify(token)?;
        let mut verified = self.verified.lock().unwrap_or_else(|e| e.into_inner());
        if verified.len() >= MAX_VERIFIED {
            verified.clear();
        }
        verified.insert(digest, (tenant.clone(), exp));
        Ok(tenant)
    }

    /// Every check of `token`: its tenant and `exp`.
    fn verify(&self, token: &str) -> Result<(Tenant, u64), JwtRefusal> {
        let invalid = |why: String| JwtRefusal::Invalid(why);
        let (alg, kid) = header_of(token).map_err(invalid)?;
        let Some(&(_, algorithm)) = ACCEPTED.iter().find(|(name, _)| *name == alg) else {
            return Err(invalid(format!(
                "the token's alg {alg:?} is not accepted (RS256, ES256 and EdDSA are)"
            )));
        };
        let keys = self.keys.read().map(|k| k.clone()).unwrap_or_default();
        let key = match &kid {
            Some(kid) => keys.get(kid),
            // No kid: the set's only key, if it has one.
            None if keys.len() == 1 => keys.values().next(),
            None => return Err(invalid("the token names no key (kid)".into())),
        };
        let Some(key) = key else {
            return Err(JwtRefusal::UnknownKey(kid.unwrap_or_default()));
        };
        let mut validation = self.validation.clone();
        validation.algorithms = vec![algorithm];
        let claims = jsonwebtoken::decode::<serde_json::Map<String, serde_json::Value>>(
            token,
            key,
            &validation,
        )
        .map_err(|e| invalid(describe(e.kind())))?
        .claims;
        check_iat(&claims)?;
        let missing = self.missing_scopes(&claims);
        if !missing.is_empty() {
            return Err(JwtRefusal::Scope(missing));
        }
        let claim = &self.tenant_claim;
        let name = claims.get(claim).and_then(|v| v.as_str()).ok_or_else(|| {
            invalid(format!(
                "the token has no {claim} claim (text) to name its tenant"
            ))
        })?;
        let tenant =
            Tenant::parse(name).map_err(|e| invalid(format!("the token's {claim} claim: {e}")))?;
        // Checked by the library: a number.
        let exp = claims
            .get("exp")
            .and_then(|v| v.as_f64())
            .map_or(0, |at| at as u64);
        Ok((tenant, exp))
    }

    /// The required scopes `claims` lack: `scope` is a space-separated
    /// text (RFC 8693), `scp` a list (as some issuers send it).
    fn missing_scopes(&self, claims: &serde_json::Map<String, serde_json::Value>) -> Vec<String> {
        let mut held: Vec<&str> = Vec::new();
        if let Some(text) = claims.get("scope").and_then(|v| v.as_str()) {
            held.extend(text.split_whitespace());
        }
        if let Some(list) = claims.get("scp").and_then(|v| v.as_array()) {
            held.extend(list.iter().filter_map(|v| v.as_str()));
        }
        self.required_scopes
            .iter()
            .filter(|scope| !held.contains(&scope.as_str()))
            .cloned()
            .collect()
    }

    /// Fetches the key set again (a token named a key it lacks), unless it
    /// was fetched less than [`MIN_REFRESH`] ago; a set that cannot be read
    /// leaves the old one, and the log says why.
    pub(crate) async fn refresh(&self) {
        let mut fetched = self.fetched.lock().await;
        if fetched.is_some_and(|at| at.elapsed() < MIN_REFRESH) {
            return;
        }
        *fetched = Some(Instant::now());
        let read = match &self.source {
            Source::File(path) => tokio::fs::read(path)
                .await
                .map_err(|e| format!("cannot read: {e}")),
            Source::Url(uri) => fetch(uri).await,
        };
        match read.and_then(|bytes| parse_set(&bytes)) {
            Ok(keys) => {
                tracing::info!(keys = keys.len(), "read the key set (--jwks)");
                if let Ok(mut held) = self.keys.write() {
                    *held = Arc::new(keys);
                }
            }
            Err(why) => tracing::warn!("--jwks: kept the keys in force: {why}"),
        }
    }
}

/// The `alg` and `kid` of a token's header, read as text (so that `none`
/// or an algorithm the library does not know is named as such).
fn header_of(token: &str) -> Result<(String, Option<String>), String> {
    #[derive(serde::Deserialize)]
    struct Header {
        alg: String,
        kid: Option<String>,
    }
    let mut parts = token.split('.');
    let (Some(head), Some(_), Some(_), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err("the token is not a JWT (three base64url parts joined by '.')".into());
    };
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(head)
        .map_err(|_| "the token's header is not base64url".to_string())?;
    let header: Header = serde_json::from_slice(&bytes)
        .map_err(|e| format!("the token's header is not a JOSE header: {e}"))?;
    Ok((header.alg, header.kid))
}

/// `iat`, when present, must be a number not in the future.
fn check_iat(claims: &serde_json::Map<String, serde_json::Value>) -> Result<(), JwtRefusal> {
    let Some(iat) = claims.get("iat") else {
        return Ok(());
    };
    let now = jsonwebtoken::get_current_timestamp();
    match iat.as_f64() {
        Some(at) if at <= (now + LEEWAY.as_secs()) as f64 => Ok(()),
        Some(_) => Err(JwtRefusal::Invalid(
            "the token was issued in the future (iat)".into(),
        )),
        None => Err(JwtRefusal::Invalid(
            "the token's iat is not a number".into(),
        )),
    }
}

/// What a failed check means, in words for the log and the client.
fn describe(kind: &jsonwebtoken::errors::ErrorKind) -> String {
    use jsonwebtoken::errors::ErrorKind as E;
    match kind {
        E::ExpiredSignature => "the token has expired (exp)".into(),
        E::ImmatureSignature => "the token is not valid yet (nbf)".into(),
        E::InvalidAudience => "the token's aud does not name this server (--audience)".into(),
        E::InvalidIssuer => "the token's iss is not --issuer".into(),
        E::InvalidSignature => "the token's signature does not hold".into(),
        E::MissingRequiredClaim(claim) => format!("the token has no {claim} claim"),
        E::InvalidClaimFormat(claim) => format!("the token's {claim} claim has the wrong type"),
        E::InvalidAlgorithm => "the token's alg does not fit its key".into(),
        other => format!("the token does not verify: {other:?}"),
    }
}

/// The keys of a JWKS document by `kid`; keys without one, or of an
/// algorithm not accepted, are skipped.
fn parse_set(bytes: &[u8]) -> Result<Keys, String> {
    let set: JwkSet =
        serde_json::from_slice(bytes).map_err(|e| format!("not a JWKS (JSON Web Key Set): {e}"))?;
    let mut keys = Keys::new();
    for jwk in &set.keys {
        let Some(kid) = &jwk.common.key_id else {
            continue;
        };
        match DecodingKey::from_jwk(jwk) {
            Ok(key) => {
                keys.insert(kid.clone(), Arc::new(key));
            }
            Err(e) => tracing::warn!(kid, "--jwks: skipped a key: {e}"),
        }
    }
    Ok(keys)
}

/// `error` and what caused it, down the chain (a client's error says
/// "connect"; its causes say that the certificate is not trusted).
fn with_causes(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    while let Some(next) = cause {
        text.push_str(": ");
        text.push_str(&next.to_string());
        cause = next.source();
    }
    text
}

/// GET `uri`, within [`FETCH_TIMEOUT`] and [`MAX_JWKS`] bytes; https
/// against the system's roots (`SSL_CERT_FILE` and `SSL_CERT_DIR` too).
async fn fetch(uri: &hyper::Uri) -> Result<Vec<u8>, String> {
    use http_body_util::BodyExt;
    let provider = rustls::crypto::aws_lc_rs::default_provider();
    let connector = hyper_rustls::HttpsConnectorBuilder::new()
        .with_provider_and_native_roots(provider)
        .map_err(|e| format!("{uri}: no trusted root certificates: {e}"))?
        .https_or_http()
        .enable_http1()
        .build();
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build::<_, http_body_util::Empty<hyper::body::Bytes>>(connector);
    let got = async {
        let response = client
            .get(uri.clone())
            .await
            .map_err(|e| format!("{uri}: {}", with_causes(&e)))?;
        if !response.status().is_success() {
            return Err(format!("{uri}: answered {}", response.status()));
        }
        let body = http_body_util::Limited::new(response.into_body(), MAX_JWKS)
            .collect()
            .await
            .map_err(|e| format!("{uri}: {e}"))?;
        Ok(body.to_bytes().to_vec())
    };
    tokio::time::timeout(FETCH_TIMEOUT, got)
        .await
        .map_err(|_| format!("{uri}: no answer within {} s", FETCH_TIMEOUT.as_secs()))?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_is_remembered_as_verified_until_it_expires() {
        let file = super::super::tokens::tests::file(r#"{"keys": []}"#);
        let path = file.path().display().to_string();
        let check = JwtCheck::new(&path, Some("iss"), Some("aud"), &[], "sub").unwrap();
        let token = "e30.e30.c2ln";
        let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        let now = jsonwebtoken::get_current_timestamp();
        let alice = Tenant("alice".into());
        let remember = |exp: u64| {
            let mut verified = check.verified.lock().unwrap();
            verified.insert(digest, (alice.clone(), exp));
        };
        remember(now + 100);
        assert_eq!(check.tenant_of(token), Ok(alice.clone()));
        // Within the leeway past exp, still; past it, checked anew (and
        // this one does not verify).
        remember(now - 10);
        assert_eq!(check.tenant_of(token), Ok(alice.clone()));
        remember(now - LEEWAY.as_secs() - 5);
        assert!(matches!(
            check.tenant_of(token),
            Err(JwtRefusal::Invalid(_))
        ));
        assert!(check.verified.lock().unwrap().is_empty());
    }
}
