//! Standard Webhooks signatures: `v1,<base64(HMAC-SHA256(secret, "{id}.{timestamp}.{body}"))>`.
//!
//! The secret comes from `TIDEMARK_WEBHOOK_SECRET` (the value) or
//! `TIDEMARK_WEBHOOK_SECRET_FILE` (a path, e.g. a mounted Kubernetes secret). A secret
//! written `whsec_<base64>` is the base64-decoded key, as Standard Webhooks libraries read
//! it; anything else is used as raw bytes. Only the keyed HMAC state is kept, and neither
//! it nor a signature is ever printed or logged.

use std::ffi::OsString;
use std::fmt;
use std::path::PathBuf;

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use hmac::{Hmac, Mac};
use sha2::Sha256;

use super::DispatchError;

pub const SECRET_ENV: &str = "TIDEMARK_WEBHOOK_SECRET";
pub const SECRET_FILE_ENV: &str = "TIDEMARK_WEBHOOK_SECRET_FILE";
const WHSEC_PREFIX: &[u8] = b"whsec_";

#[derive(Clone)]
pub struct Signer {
    mac: Hmac<Sha256>,
}

impl fmt::Debug for Signer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Signer").field("secret", &"<redacted>").finish()
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
                let origin = format!("{SECRET_FILE_ENV}={}", path.display());
                let mut bytes = std::fs::read(&path)
                    .map_err(|e| DispatchError::Secret { origin: origin.clone(), detail: e.to_string() })?;
                while bytes.last().is_some_and(|b| *b == b'\n' || *b == b'\r') {
                    bytes.pop();
                }
                Signer::from_secret(&bytes, &origin).map(Some)
            }
        }
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
        Ok(Signer { mac })
    }

    /// The `webhook-signature` header value for one attempt.
    pub fn sign(&self, msg_id: &str, timestamp_s: i64, body: &[u8]) -> String {
        let mut mac = self.mac.clone();
        mac.update(msg_id.as_bytes());
        mac.update(b".");
        mac.update(timestamp_s.to_string().as_bytes());
        mac.update(b".");
        mac.update(body);
        format!("v1,{}", STANDARD.encode(mac.finalize().into_bytes()))
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
