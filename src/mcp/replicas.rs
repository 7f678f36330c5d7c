//! Replicas behind one balancer (`--cluster-secret`, `--advertise`): the
//! state of a call that waits for its client — a suspended question's
//! `requestState`, a task's id — lives in the memory of the replica that made
//! it, so the id a client is given names that replica, sealed so that no
//! client can forge it or point it elsewhere.
//!
//! An id is `LOCAL~TAG`: `LOCAL` is what the replica itself made (and still
//! checks as before); `TAG` is base64url of the replica's instance (random
//! at each start), an HMAC-SHA256 under the cluster's secret over all of
//! it, and the address its peers reach it at. A replica that gets a request
//! naming another's id forwards it there (`super::http::forward`); one naming
//! an instance that is no more (the address now answers as another instance,
//! or not at all) is answered with an error naming what was lost.

// Ids are located and forwarded by the HTTP front end only.
#![cfg_attr(not(feature = "http"), allow(dead_code))]

use std::path::Path;

use base64::Engine as _;
use sha2::{Digest, Sha256};

use super::sealing::{hmac, random, same_mac};

/// Between an id's own part and its tag (neither base64url nor hex has it).
const SEPARATOR: char = '~';
/// The bytes of an instance, and of a tag's MAC.
const INSTANCE: usize = 8;
const MAC: usize = 16;

/// This replica: the cluster's secret, its instance and its address.
#[derive(Clone)]
pub struct Replica {
    secret: [u8; 32],
    instance: [u8; INSTANCE],
    address: String,
}

impl std::fmt::Debug for Replica {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Replica")
            .field("address", &self.address)
            .finish_non_exhaustive()
    }
}

/// Where an id's state lives.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Place {
    /// In this replica (or the id carries no tag: a single server's).
    Here,
    /// In the replica at this address, if it is still the instance that
    /// made the id.
    Peer(String),
    /// In an instance that is no more: this one's address, another start.
    Gone,
    /// Nowhere: the tag does not verify (made up, or another cluster's).
    Forged,
}

impl Replica {
    /// The secret is `secret_file`'s first line (at least 32 characters);
    /// `address` is `HOST:PORT` as the other replicas reach this one.
    pub fn new(secret_file: &Path, address: &str) -> Result<Replica, String> {
        let text = std::fs::read_to_string(secret_file).map_err(|e| {
            format!(
                "--cluster-secret {}: cannot read: {e}",
                secret_file.display()
            )
        })?;
        let secret = text.lines().next().unwrap_or("").trim();
        if secret.len() < 32 {
            return Err(format!(
                "--cluster-secret {}: the secret must have at least 32 characters (`openssl rand -hex 32` makes one)",
                secret_file.display()
            ));
        }
        let host_port = address
            .rsplit_once(':')
            .filter(|(_, port)| port.parse::<u16>().is_ok_and(|p| p > 0));
        let host_ok = host_port.is_some_and(|(host, _)| {
            !host.is_empty()
                && host
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-.[]:".contains(&b))
        });
        if !host_ok {
            return Err(format!(
                "--advertise {address}: give HOST:PORT, the address the other replicas reach this one at"
            ));
        }
        Ok(Replica {
            secret: Sha256::digest(secret.as_bytes()).into(),
            instance: random(),
            address: address.to_string(),
        })
    }

    /// The address the other replicas reach this one at.
    pub(crate) fn address(&self) -> &str {
        &self.address
    }

    /// `local` tagged with this replica.
    pub(crate) fn tag(&self, local: &str) -> String {
        let mac = self.mac(local, &self.instance, self.address.as_bytes());
        let mut bytes = Vec::with_capacity(INSTANCE + MAC + self.address.len());
        bytes.extend_from_slice(&self.instance);
        bytes.extend_from_slice(&mac[..MAC]);
        bytes.extend_from_slice(self.address.as_bytes());
        let tag = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes);
        format!("{local}{SEPARATOR}{tag}")
    }

    /// Where the state `id` names lives.
    pub(crate) fn locate(&self, id: &str) -> Place {
        let Some((local, tag)) = id.split_once(SEPARATOR) else {
            return Place::Here;
        };
        let Ok(bytes) = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(tag) else {
            return Place::Forged;
        };
        if bytes.len() <= INSTANCE + MAC {
            return Place::Forged;
        }
        let (instance, rest) = bytes.split_at(INSTANCE);
        let (mac, address) = rest.split_at(MAC);
        if !same_mac(mac, &self.mac(local, instance, address)[..MAC]) {
            return Place::Forged;
        }
        let Ok(address) = std::str::from_utf8(address) else {
            return Place::Forged;
        };
        match (instance == self.instance, address == self.address) {
            (true, _) => Place::Here,
            (false, true) => Place::Gone,
            (false, false) => Place::Peer(address.to_string()),
        }
    }

    fn mac(&self, local: &str, instance: &[u8], address: &[u8]) -> [u8; 32] {
        let length = (local.len() as u64).to_le_bytes();
        hmac(
            &self.secret,
            &[
                b"toolpool/replica",
                &length,
                local.as_bytes(),
                instance,
                address,
            ],
        )
    }
}

/// `id` without its tag: what its replica made.
pub(crate) fn local_part(id: &str) -> &str {
    id.split_once(SEPARATOR).map_or(id, |(local, _)| local)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn replica(secret: &str, address: &str) -> Replica {
        let file = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(file.path(), format!("{secret}\n")).unwrap();
        Replica::new(file.path(), address).unwrap()
    }

    const SECRET: &str = "0123456789abcdef0123456789abcdef";

    #[test]
    fn an_id_names_its_replica_and_nothing_else_verifies() {
        let a = replica(SECRET, "10.0.0.1:8080");
        let b = replica(SECRET, "10.0.0.2:8080");
        let id = a.tag("c0ffee");
        assert_eq!(local_part(&id), "c0ffee");
        assert_eq!(a.locate(&id), Place::Here);
        assert_eq!(b.locate(&id), Place::Peer("10.0.0.1:8080".into()));
        // A restart at the same address is another instance.
        let a_again = replica(SECRET, "10.0.0.1:8080");
        assert_eq!(a_again.locate(&id), Place::Gone);
        // Another cluster's secret, another local part, a tag pointed
        // elsewhere: forged.
        let other = replica("another-secret-0123456789abcdef0123", "10.0.0.1:8080");
        assert_eq!(other.locate(&id), Place::Forged);
        let (_, tag) = id.split_once(SEPARATOR).unwrap();
        assert_eq!(b.locate(&format!("deadbeef~{tag}")), Place::Forged);
        let mut bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(tag)
            .unwrap();
        let last = bytes.len() - 1;
        bytes[last] = b'9';
        let redirected = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes);
        assert_eq!(b.locate(&format!("c0ffee~{redirected}")), Place::Forged);
        for junk in ["x~", "x~!!", "x~AAAA"] {
            assert_eq!(b.locate(junk), Place::Forged, "{junk}");
        }
        assert_eq!(b.locate("untagged"), Place::Here);
    }

    #[test]
    fn bad_options_are_refused_naming_them() {
        let file = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(file.path(), "short\n").unwrap();
        let error = Replica::new(file.path(), "10.0.0.1:80").unwrap_err();
        assert!(error.contains("at least 32 characters"), "{error}");
        std::fs::write(file.path(), SECRET).unwrap();
        for bad in ["10.0.0.1", "http://10.0.0.1:80", "a b:80", "host:80/x"] {
            let error = Replica::new(file.path(), bad).unwrap_err();
            assert!(error.contains("--advertise"), "{bad}: {error}");
        }
    }
}
