//! Bearer tokens: what one must be (`--auth-token-file`'s, `--auth-tokens`'),
//! how two are compared, and who a caller is on a deployment shared by many
//! users (`--auth-tokens FILE`): each line of the file gives a tenant and one of
//! its bearer tokens, and a request's token decides its tenant. A tenant's
//! sessions are its own (`SessionsRoot::for_tenant`): the names it gives
//! are looked up among them only, so no tenant can name another's.
//!
//! The file is re-read on SIGHUP; a file that does not parse keeps the
//! tokens in force, and the log says why.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use sha2::{Digest, Sha256};

use crate::context::sessions::check_session_name;

/// Shortest token accepted: anything shorter could be guessed.
const MIN_TOKEN_LEN: usize = 16;

/// Longest tenant name: with `~` and a session name (128 at most), a
/// session id stays one path component of at most 255 bytes.
const MAX_TENANT: usize = 64;

/// The tenant a request authenticated as (in the request's extensions,
/// where the MCP handler finds it).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct Tenant(pub(crate) String);

impl Tenant {
    /// `name` as a tenant: a session-name-shaped word of at most
    /// [`MAX_TENANT`] characters; else what is wrong with it.
    pub(crate) fn parse(name: &str) -> Result<Tenant, String> {
        check_session_name(name).map_err(|e| e.replacen("session name", "name", 1))?;
        if name.len() > MAX_TENANT {
            return Err(format!("the name has more than {MAX_TENANT} characters"));
        }
        Ok(Tenant(name.to_string()))
    }
}

/// Tokens as SHA-256 digests, each with its tenant.
type Digests = Vec<([u8; 32], Tenant)>;

/// The tokens of `--auth-tokens`, swapped whole by a reload.
#[derive(Debug, Clone)]
pub(crate) struct TenantTokens {
    file: PathBuf,
    tokens: Arc<RwLock<Arc<Digests>>>,
}

impl TenantTokens {
    /// Reads `file`; an error names the file, the line and what is wrong.
    pub(crate) fn load(file: &Path) -> Result<TenantTokens, String> {
        let tokens = read(file)?;
        Ok(TenantTokens {
            file: file.to_path_buf(),
            tokens: Arc::new(RwLock::new(Arc::new(tokens))),
        })
    }

    /// Reads the file again: the new set on success (how many tokens of
    /// how many tenants), else the old one stays and the error says why.
    pub(crate) fn reload(&self) -> Result<(usize, usize), String> {
        let tokens = read(&self.file)?;
        let counts = counts(&tokens);
        if let Ok(mut held) = self.tokens.write() {
            *held = Arc::new(tokens);
        }
        Ok(counts)
    }

    /// The tenant whose token `given` is. Every token is compared, in
    /// constant time, whether or not an earlier one matched: how long the
    /// check takes tells nothing of which tokens exist.
    pub(crate) fn tenant_of(&self, given: &str) -> Option<Tenant> {
        let digest: [u8; 32] = Sha256::digest(given.as_bytes()).into();
        let tokens = match self.tokens.read() {
            Ok(tokens) => tokens.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        };
        let mut found = None;
        for (token, tenant) in tokens.iter() {
            if constant_time_eq(&digest, token) && found.is_none() {
                found = Some(tenant.clone());
            }
        }
        found
    }
}

/// Re-reads `tokens`' file at every SIGHUP until the server ends (the task
/// is aborted), logging what is in force.
pub(crate) async fn reload_on_hangup(tokens: TenantTokens) {
    use tokio::signal::unix::{signal, SignalKind};
    let mut hangups = match signal(SignalKind::hangup()) {
        Ok(hangups) => hangups,
        Err(e) => {
            tracing::warn!("cannot listen for SIGHUP: --auth-tokens will not be re-read: {e}");
            return;
        }
    };
    while hangups.recv().await.is_some() {
        match tokens.reload() {
            Ok((count, tenants)) => tracing::info!(
                file = %tokens.file.display(),
                "--auth-tokens re-read: {count} tokens of {tenants} tenants in force"
            ),
            Err(e) => tracing::warn!("{e}; the tokens in force stay"),
        }
    }
}

fn counts(tokens: &Digests) -> (usize, usize) {
    let mut tenants: Vec<&str> = tokens.iter().map(|(_, t)| t.0.as_str()).collect();
    tenants.sort_unstable();
    tenants.dedup();
    (tokens.len(), tenants.len())
}

/// `TENANT TOKEN` a line; `#` starts a comment; blank lines are skipped. A
/// tenant is a session-name-shaped word; a token follows `--auth-token-file`'s
/// rules; a token given twice is an error (it would name two tenants).
fn read(file: &Path) -> Result<Digests, String> {
    let what = format!("--auth-tokens {}", file.display());
    let text = std::fs::read_to_string(file).map_err(|e| format!("{what}: cannot read: {e}"))?;
    let mut tokens: Digests = Vec::new();
    for (at, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let place = format!("{what}, line {}", at + 1);
        let mut words = line.split_whitespace();
        let (Some(tenant), Some(token), None) = (words.next(), words.next(), words.next()) else {
            return Err(format!("{place}: give TENANT TOKEN, two words"));
        };
        let tenant = Tenant::parse(tenant).map_err(|e| format!("{place}: the tenant: {e}"))?;
        let token = check_token(token.to_string(), &format!("{place}: the token"))?;
        let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        if tokens.iter().any(|(known, _)| *known == digest) {
            return Err(format!("{place}: this token is given twice"));
        }
        tokens.push((digest, tenant));
    }
    if tokens.is_empty() {
        return Err(format!("{what}: no token (give TENANT TOKEN lines)"));
    }
    Ok(tokens)
}

/// `token` if it is long enough and can travel in an `Authorization`
/// header, else why not (`what` names where it came from).
pub(super) fn check_token(token: String, what: &str) -> Result<String, String> {
    if token.chars().count() < MIN_TOKEN_LEN {
        return Err(format!(
            "{what} is too short: a token needs at least {MIN_TOKEN_LEN} characters"
        ));
    }
    if !token.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(format!(
            "{what} has spaces or characters other than printable ASCII, which an Authorization header cannot carry"
        ));
    }
    Ok(token)
}

/// Equal or not, looking at every byte either way.
pub(super) fn constant_time_eq(a: &[u8; 32], b: &[u8; 32]) -> bool {
    let diff = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    std::hint::black_box(diff) == 0
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// A file holding `text`, gone when dropped.
    pub(in crate::mcp::http) fn file(text: &str) -> tempfile::NamedTempFile {
        let file = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(file.path(), text).unwrap();
        file
    }

    #[test]
    fn each_token_names_its_tenant_and_others_none() {
        let f = file("# team\nalice alice-token-0123456789\n\nbob bob-token-0123456789ab # ops\nalice alice-second-token-0123\n");
        let tokens = TenantTokens::load(f.path()).unwrap();
        let tenant = |t: &str| tokens.tenant_of(t).map(|t| t.0);
        assert_eq!(tenant("alice-token-0123456789").as_deref(), Some("alice"));
        assert_eq!(tenant("alice-second-token-0123").as_deref(), Some("alice"));
        assert_eq!(tenant("bob-token-0123456789ab").as_deref(), Some("bob"));
        assert_eq!(tenant("carol-token-0123456789"), None);
        assert_eq!(tenant(""), None);
    }

    #[test]
    fn a_bad_file_is_refused_naming_the_line_and_a_reload_keeps_the_old_set() {
        for (text, says) in [
            ("alice\n", "line 1: give TENANT TOKEN"),
            ("alice a b c\n", "line 1: give TENANT TOKEN"),
            ("../x token-0123456789abcdef\n", "line 1: the tenant"),
            ("alice short\n", "line 1: the token is too short"),
            (
                "a token-0123456789abcdef\nb token-0123456789abcdef\n",
                "line 2: this token is given twice",
            ),
            ("# nothing\n", "no token"),
        ] {
            let error = TenantTokens::load(file(text).path()).unwrap_err();
            assert!(error.contains(says), "{text:?}: {error}");
        }
        let f = file("alice alice-token-0123456789\n");
        let tokens = TenantTokens::load(f.path()).unwrap();
        std::fs::write(f.path(), "alice\n").unwrap();
        assert!(tokens.reload().unwrap_err().contains("line 1"));
        assert!(tokens.tenant_of("alice-token-0123456789").is_some());
        std::fs::write(f.path(), "bob bob-token-0123456789ab\n").unwrap();
        assert_eq!(tokens.reload(), Ok((1, 1)));
        assert!(tokens.tenant_of("alice-token-0123456789").is_none());
        assert!(tokens.tenant_of("bob-token-0123456789ab").is_some());
    }
}
