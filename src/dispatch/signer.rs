//! Standard Webhooks signatures: `v1,<base64(HMAC-SHA256(secret, "{id}.{timestamp}.{body}"))>`.
//!
//! The secret comes from `TIDEMARK_WEBHOOK_SECRET` (the value) or
//! `TIDEMARK_WEBHOOK_SECRET_FILE` (a path, e.g. a mounted Kubernetes secret). A secret
//! written `whsec_<base64>` is the base64-decoded key, as Standard Webhooks libraries read
//! it; anything else is used as raw bytes. Only the keyed HMAC state is kept, and neither
//! it nor a signature is ever printed or logged.
//!
//! Rotation: the file may hold two secrets, one per line, the new one first. Each request
//! then carries both signatures, space-separated, as Standard Webhooks multi-signature
//! (`v1,<with new> v1,<with old>`): a receiver that knows either secret verifies it. A
//! [`SecretWatch`] re-reads the file so a rotated Kubernetes Secret is used without restart.

use std::ffi::OsString;
use std::fmt;
use std::path::PathBuf;
use std::sync::{Arc, PoisonError, RwLock};

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

use super::DispatchError;

pub const SECRET_ENV: &str = "TIDEMARK_WEBHOOK_SECRET";
pub const SECRET_FILE_ENV: &str = "TIDEMARK_WEBHOOK_SECRET_FILE";
const WHSEC_PREFIX: &[u8] = b"whsec_";

/// Secrets one file may hold: the current one and the one it replaces.
pub const MAX_SECRETS: usize = 2;

/// One keyed HMAC per secret, the newest first.
#[derive(Clone)]
pub struct Signer {
    macs: Vec<Hmac<Sha256>>,
}

impl fmt::Debug for Signer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Signer").field("secrets", &self.macs.len()).field("secret", &"<redacted>").finish()
    }
}

impl Signer {
    /// Reads the secret from the environment; `Ok(None)` when neither variable is set
    /// (requests then go unsigned). Setting both, an empty secret, an unreadable file or a
    /// `whsec_` value that is not base64 is an error.
    pub fn from_env_or_file() -> Result<Option<Signer>, DispatchError> {
        Signer::from_sources(std::env::var_os(SECRET_ENV), std::env::var_os(SECRET_FILE_ENV).map(PathBuf::from))
    }

    /// [`Signer::from_env_or_file`] with the two variables' values passed in.
    pub fn from_sources(value: Option<OsString>, file: Option<PathBuf>) -> Result<Option<Signer>, DispatchError> {
        match (value, file) {
            (None, None) => Ok(None),
            (Some(_), Some(_)) => Err(DispatchError::Secret {
                origin: format!("{SECRET_ENV} and {SECRET_FILE_ENV}"),
                detail: "set only one of them".into(),
            }),
            (Some(value), None) => Signer::from_secret(&value.into_encoded_bytes(), SECRET_ENV).map(Some),
            (None, Some(path)) => {
                let origin = file_origin(&path);
                let bytes = std::fs::read(&path)
                    .map_err(|e| DispatchError::Secret { origin: origin.clone(), detail: e.to_string() })?;
                Signer::from_file_contents(&bytes, &origin).map(Some)
            }
        }
    }

    /// A secret file's contents: one secret per line, the newest first, at most
    /// [`MAX_SECRETS`]; blank lines and line ends (`\n`, `\r\n`) are ignored.
    pub fn from_file_contents(contents: &[u8], origin: &str) -> Result<Signer, DispatchError> {
        let lines: Vec<&[u8]> = contents
            .split(|b| *b == b'\n')
            .map(|l| l.strip_suffix(b"\r").unwrap_or(l))
            .filter(|l| !l.is_empty())
            .collect();
        if lines.len() > MAX_SECRETS {
            return Err(DispatchError::Secret {
                origin: origin.into(),
                detail: format!(
                    "holds {} secrets; at most {MAX_SECRETS} (the new one, then the previous)",
                    lines.len()
                ),
            });
        }
        Signer::from_secrets(&lines, origin)
    }

    /// One signature per secret, the newest first.
    pub fn from_secrets(secrets: &[&[u8]], origin: &str) -> Result<Signer, DispatchError> {
        if secrets.is_empty() {
            return Err(DispatchError::Secret { origin: origin.into(), detail: "the secret is empty".into() });
        }
        let mut macs = Vec::with_capacity(secrets.len());
        for (i, secret) in secrets.iter().enumerate() {
            let origin = if secrets.len() > 1 { format!("{origin} (line {})", i + 1) } else { origin.to_string() };
            macs.extend(Signer::from_secret(secret, &origin)?.macs);
        }
        Ok(Signer { macs })
    }

    /// How many signatures each request carries (2 during a rotation).
    pub fn secrets(&self) -> usize {
        self.macs.len()
    }

    /// Builds a signer from a secret as configured: `whsec_<base64>` or raw bytes.
    /// `origin` names where it came from, for the error message.
    pub fn from_secret(secret: &[u8], origin: &str) -> Result<Signer, DispatchError> {
        let error = |detail: &str| DispatchError::Secret { origin: origin.into(), detail: detail.into() };
        let key = match secret.strip_prefix(WHSEC_PREFIX) {
            // The decoder's message would quote the offending byte of the secret.
            Some(encoded) => STANDARD.decode(encoded).map_err(|_| error("the part after `whsec_` is not base64"))?,
            None => secret.to_vec(),
        };
        if key.is_empty() {
            return Err(error("the secret is empty"));
        }
        let mac = Hmac::<Sha256>::new_from_slice(&key).map_err(|_| error("unusable HMAC key"))?;
        Ok(Signer { macs: vec![mac] })
    }

    /// The `webhook-signature` header value for one attempt: `v1,<sig>` per secret,
    /// space-separated, the newest first.
    pub fn sign(&self, msg_id: &str, timestamp_s: i64, body: &[u8]) -> String {
        let timestamp = timestamp_s.to_string();
        let signatures: Vec<String> = self
            .macs
            .iter()
            .map(|mac| {
                let mut mac = mac.clone();
                mac.update(msg_id.as_bytes());
                mac.update(b".");
                mac.update(timestamp.as_bytes());
                mac.update(b".");
                mac.update(body);
                format!("v1,{}", STANDARD.encode(mac.finalize().into_bytes()))
            })
            .collect();
        signatures.join(" ")
    }
}

fn file_origin(path: &std::path::Path) -> String {
    format!("{SECRET_FILE_ENV}={}", path.display())
}

/// The signer in use, shared between the dispatcher and a [`SecretWatch`] that may replace
/// it. Reading it takes an uncontended read lock and no I/O.
#[derive(Clone, Default)]
pub struct SignerSlot(Arc<RwLock<Option<Arc<Signer>>>>);

impl fmt::Debug for SignerSlot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("SignerSlot").field(&self.current()).finish()
    }
}

impl SignerSlot {
    pub fn new(signer: Option<Signer>) -> Self {
        SignerSlot(Arc::new(RwLock::new(signer.map(Arc::new))))
    }

    pub fn current(&self) -> Option<Arc<Signer>> {
        self.0.read().unwrap_or_else(PoisonError::into_inner).clone()
    }

    fn replace(&self, signer: Signer) {
        *self.0.write().unwrap_or_else(PoisonError::into_inner) = Some(Arc::new(signer));
    }
}

/// Re-reads a secret file and installs its secrets when its contents change: Kubernetes
/// updates a mounted Secret in place. A changed file that is unusable (empty mid-update,
/// three lines) leaves the signer in use untouched and is reported once per change.
pub struct SecretWatch {
    path: PathBuf,
    slot: SignerSlot,
    /// SHA-256 of the contents last seen; `None` until the first check.
    seen: Option<[u8; 32]>,
}

/// What one [`SecretWatch::check`] found.
#[derive(Debug, PartialEq, Eq)]
pub enum SecretChange {
    Unchanged,
    /// New secrets are in use; how many.
    Reloaded {
        secrets: usize,
    },
}

impl SecretWatch {
    pub fn new(path: PathBuf, slot: SignerSlot) -> Self {
        SecretWatch { path, slot, seen: None }
    }

    /// Reads the file on tokio's blocking pool and swaps in its secrets if it
    /// changed since the last check.
    pub async fn check(&mut self) -> Result<SecretChange, DispatchError> {
        let origin = file_origin(&self.path);
        let path = self.path.clone();
        let bytes = tokio::task::spawn_blocking(move || std::fs::read(path))
            .await
            .map_err(|e| DispatchError::Secret { origin: origin.clone(), detail: e.to_string() })?
            .map_err(|e| DispatchError::Secret { origin: origin.clone(), detail: e.to_string() })?;
        let digest: [u8; 32] = Sha256::digest(&bytes).into();
        if self.seen == Some(digest) {
            return Ok(SecretChange::Unchanged);
        }
        // The first check only records what the dispatcher was built with (installing it
        // again in case the file changed in between).
        let first = self.seen.replace(digest).is_none();
        let signer = Signer::from_file_contents(&bytes, &origin)?;
        let secrets = signer.secrets();
        self.slot.replace(signer);
        Ok(if first { SecretChange::Unchanged } else { SecretChange::Reloaded { secrets } })
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    #[test]
    fn signatures_reproduce_the_standard_webhooks_test_vector() {
        let signer = Signer::from_secret(b"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "test").unwrap();
        let signature = signer.sign("msg_p5jXN8AQM9LWM0D4loKWxJek", 1_614_265_330, br#"{"test": 2432232314}"#);
        assert_eq!(signature, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
    }

    #[test]
    fn a_whsec_secret_is_its_decoded_key_and_any_other_secret_is_raw_bytes() {
        let raw = b"raw key bytes";
        let encoded = format!("whsec_{}", STANDARD.encode(raw));
        let a = Signer::from_secret(encoded.as_bytes(), "test").unwrap().sign("k", 1, b"{}");
        let b = Signer::from_secret(raw, "test").unwrap().sign("k", 1, b"{}");
        assert_eq!(a, b);
        let c = Signer::from_secret(encoded.as_bytes(), "test").unwrap().sign("k", 2, b"{}");
        assert_ne!(a, c, "the timestamp is signed");
    }

    #[test]
    fn no_variable_means_no_signer() {
        assert!(Signer::from_sources(None, None).unwrap().is_none());
    }

    #[test]
    fn a_secret_file_has_its_trailing_newline_trimmed() {
        let mut file = tempfile::NamedTempFile::new().unwrap();
        file.write_all(b"file-secret\r\n").unwrap();
        let from_file = Signer::from_sources(None, Some(file.path().to_owned())).unwrap().unwrap();
        let from_value = Signer::from_sources(Some("file-secret".into()), None).unwrap().unwrap();
        assert_eq!(from_file.sign("k", 1, b"x"), from_value.sign("k", 1, b"x"));
    }

    #[test]
    fn unusable_secrets_are_configuration_errors_that_do_not_quote_the_secret() {
        let file = tempfile::NamedTempFile::new().unwrap();
        let missing = PathBuf::from("/nonexistent/tidemark-secret");
        let cases: Vec<(Option<OsString>, Option<PathBuf>)> = vec![
            (Some("a".into()), Some(missing.clone())),
            (Some("".into()), None),
            (Some("whsec_".into()), None),
            (Some("whsec_not*base64!".into()), None),
            (None, Some(missing)),
            (None, Some(file.path().to_owned())),
        ];
        for (value, path) in cases {
            let err = Signer::from_sources(value.clone(), path.clone()).unwrap_err();
            assert!(matches!(err, DispatchError::Secret { .. }), "{value:?} {path:?}: {err}");
            assert!(!err.is_retriable());
            assert!(!err.to_string().contains("base64!"), "{err}");
        }
    }

    #[test]
    fn a_secret_file_holds_one_or_two_secrets_the_newest_first() {
        let one = Signer::from_file_contents(b"new\n", "t").unwrap();
        let two = Signer::from_file_contents(b"new\r\n\nold\n", "t").unwrap();
        let old = Signer::from_file_contents(b"old", "t").unwrap();
        assert_eq!((one.secrets(), two.secrets()), (1, 2));
        assert_eq!(two.sign("k", 1, b"x"), format!("{} {}", one.sign("k", 1, b"x"), old.sign("k", 1, b"x")));
        let err = Signer::from_file_contents(b"a\nb\nc\n", "f").unwrap_err();
        assert!(err.to_string().contains("holds 3 secrets; at most 2"), "{err}");
        let err = Signer::from_file_contents(b"whsec_b2s=\nwhsec_*\n", "f").unwrap_err();
        assert!(err.to_string().contains("f (line 2)"), "{err}");
    }

    #[test]
    fn debug_output_never_shows_the_secret() {
        let secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
        let shown = format!(
            "{:?} {:#?}",
            Signer::from_secret(secret.as_bytes(), "t").unwrap(),
            Signer::from_secret(b"hunter2-raw", "t").unwrap()
        );
        assert!(!shown.contains("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"), "{shown}");
        assert!(!shown.contains("hunter2"), "{shown}");
        assert!(shown.contains("redacted"));
    }
}
