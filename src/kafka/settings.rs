//! librdkafka settings shared by every client tidemark creates.
//!
//! Users pass any librdkafka property with `-X key=value` or a properties file
//! (`--kafka-config FILE`, one `key=value` per line, `#` comments), which is how TLS and SASL
//! settings reach the clients. Values of secret-looking keys are never printed.

use std::path::Path;

use rdkafka::ClientConfig;

use crate::cli::KafkaArgs;

#[derive(Clone, Debug, Default)]
pub struct KafkaSettings {
    pub bootstrap: String,
    pub extra: Vec<(String, String)>,
}

impl KafkaSettings {
    pub fn new(bootstrap: &str) -> Self {
        KafkaSettings { bootstrap: bootstrap.to_string(), extra: Vec::new() }
    }

    /// The settings of a command's `--bootstrap`, `--kafka-config` and `-X` flags, validated.
    pub fn from_args(k: &KafkaArgs) -> anyhow::Result<Self> {
        let mut s = KafkaSettings::new(&k.bootstrap);
        if let Some(f) = &k.kafka_config {
            s = s.with_file(f).map_err(anyhow::Error::msg)?;
        }
        let s = s.with_pairs(&k.kafka_option).map_err(anyhow::Error::msg)?;
        // Here rather than at the first client: librdkafka's message would quote secret values.
        s.validate().map_err(anyhow::Error::msg)?;
        Ok(s)
    }

    /// Adds `key=value` pairs; reports every malformed one at once.
    pub fn with_pairs(mut self, pairs: &[String]) -> Result<Self, String> {
        let mut bad = Vec::new();
        for p in pairs {
            match p.split_once('=') {
                Some((k, v)) if !k.trim().is_empty() => self.extra.push((k.trim().to_string(), v.trim().to_string())),
                _ => bad.push(format!("-X {p}: expected key=value")),
            }
        }
        if bad.is_empty() {
            Ok(self)
        } else {
            Err(bad.join("\n"))
        }
    }

    /// Reads a properties file of librdkafka settings.
    pub fn with_file(self, path: &Path) -> Result<Self, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let pairs: Vec<String> =
            text.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')).map(str::to_string).collect();
        self.with_pairs(&pairs).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// Every client's configuration: the bootstrap servers, TCP_NODELAY on broker sockets,
    /// then the user's settings (`--kafka-config`, which may change either). librdkafka
    /// leaves Nagle's algorithm on by default (the Java client does not): a small produce
    /// request then waits for the broker's delayed ACK, ~40 ms on Linux, and every commit
    /// waits for its outputs' acknowledgement (measured: p50 37 ms of a 20k/s commit).
    pub fn client_config(&self) -> ClientConfig {
        let mut c = ClientConfig::new();
        c.set("bootstrap.servers", &self.bootstrap);
        c.set("socket.nagle.disable", "true");
        for (k, v) in &self.extra {
            c.set(k, v);
        }
        c
    }

    /// A consumer that reads input logs as the tasks must see them, for the stream thread,
    /// the standby thread and the batch reads alike (each adds only what is its own):
    /// committed records only (`read_committed`); offsets never committed or stored by the
    /// client (the checkpoints in the state store are the truth); a position outside the log
    /// is an error event, never a silent jump (`auto.offset.reset=error`, see
    /// `stream::gap`); fetches answered within 50 ms of data arriving, and fetched again
    /// 10 ms after the prefetch queue has room (librdkafka's default 1 s postponement cost
    /// a drain 40k → 57k records/s).
    pub fn log_reader_config(&self, group: &str) -> ClientConfig {
        let mut c = self.client_config();
        c.set("group.id", group)
            .set("enable.auto.commit", "false")
            .set("enable.auto.offset.store", "false")
            .set("auto.offset.reset", "error")
            .set("isolation.level", "read_committed")
            .set("fetch.wait.max.ms", "50")
            .set("fetch.queue.backoff.ms", "10");
        c
    }

    /// Checks every property with librdkafka without creating a client. librdkafka's
    /// messages quote the rejected value ("... not supported in this build ... <value>"), so
    /// secret values are removed from the message.
    pub fn validate(&self) -> Result<(), String> {
        match self.client_config().create_native_config() {
            Ok(_) => Ok(()),
            Err(e) => Err(self.redact_text(&e.to_string())),
        }
    }

    /// `text` with every secret value of these settings replaced.
    pub fn redact_text(&self, text: &str) -> String {
        let mut out = text.to_string();
        for (k, v) in &self.extra {
            if is_secret(k) && !v.is_empty() {
                out = out.replace(v.as_str(), "<redacted>");
            }
        }
        out
    }

    /// The settings as they may be logged: secrets replaced.
    pub fn redacted(&self) -> String {
        let mut parts = vec![format!("bootstrap.servers={}", self.bootstrap)];
        for (k, v) in &self.extra {
            parts.push(format!("{k}={}", if is_secret(k) { "<redacted>" } else { v }));
        }
        parts.join(" ")
    }
}

/// Certificates (public) that may be shown; every other `*.pem` / `*_pem` carries a key.
const PUBLIC_PEM: [&str; 2] = ["ssl.certificate.pem", "ssl.ca.pem"];

/// Whether a librdkafka property's value must never be printed. Errs on the side of hiding:
/// passwords (`sasl.password`, `ssl.key.password`, `ssl.keystore.password`), OAuth settings
/// (`sasl.oauthbearer.config` holds `clientSecret=`, `sasl.oauthbearer.client.secret`,
/// `sasl.oauthbearer.assertion.*`), key material (`ssl.key.pem`, `ssl_key`, keystores,
/// `sasl.kerberos.keytab`), JAAS lines, tokens, and anything whose name merely suggests one.
pub fn is_secret(key: &str) -> bool {
    let k = key.trim().to_ascii_lowercase();
    if PUBLIC_PEM.contains(&k.as_str()) {
        return false;
    }
    const WORDS: [&str; 10] =
        ["password", "secret", "key", "token", "jaas", "oauthbearer", "credential", "keytab", "keystore", "assertion"];
    WORDS.iter().any(|w| k.contains(w)) || k.ends_with(".pem") || k.ends_with("_pem")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_never_appear_in_the_redacted_form() {
        let s = KafkaSettings::new("b:9092")
            .with_pairs(&["sasl.password=hunter2".into(), "ssl.key.pem=PEM".into(), "acks=all".into()])
            .expect("pairs");
        let r = s.redacted();
        assert!(!r.contains("hunter2") && !r.contains("PEM"), "{r}");
        assert!(r.contains("acks=all"));
    }

    #[test]
    fn every_secret_bearing_librdkafka_property_is_redacted() {
        let secret = [
            "sasl.password",
            "sasl.oauthbearer.config",
            "sasl.oauthbearer.client.secret",
            "sasl.oauthbearer.client.id",
            "sasl.oauthbearer.assertion.private.key.passphrase",
            "sasl.oauthbearer.assertion.private.key.pem",
            "sasl.oauthbearer.assertion.private.key.file",
            "sasl.oauthbearer.token.endpoint.url",
            "sasl.kerberos.keytab",
            "sasl.jaas.config",
            "ssl.key.password",
            "ssl.key.pem",
            "ssl_key",
            "ssl.keystore.password",
            "ssl.keystore.location",
            "SSL.Key.Password",
            "https.client.private.key.pem",
            "some.plugin.pem",
        ];
        let pairs: Vec<String> = secret.iter().enumerate().map(|(i, k)| format!("{k}=VALUE-{i:02}-X")).collect();
        let r = KafkaSettings::new("b:9092").with_pairs(&pairs).expect("pairs").redacted();
        for (i, k) in secret.iter().enumerate() {
            assert!(!r.contains(&format!("VALUE-{i:02}-X")), "{k} leaked: {r}");
        }
        for public in ["ssl.certificate.pem", "ssl.ca.pem", "ssl.ca.location", "sasl.mechanism", "sasl.username"] {
            assert!(!is_secret(public), "{public} is not a secret");
        }
    }

    #[test]
    fn a_rejected_secret_property_is_reported_without_its_value() {
        let s = KafkaSettings::new("b:9092")
            .with_pairs(&["ssl.key.password=hunter2".into(), "sasl.password.nonexistent=hunter3".into()])
            .expect("pairs");
        let err = s.validate().expect_err("unknown property");
        assert!(!err.contains("hunter2") && !err.contains("hunter3"), "{err}");
        assert!(KafkaSettings::new("b:9092").with_pairs(&["acks=all".into()]).expect("pairs").validate().is_ok());
    }

    #[test]
    fn malformed_pairs_are_all_reported() {
        let err = KafkaSettings::new("b").with_pairs(&["a".into(), "=b".into(), "c=d".into()]).expect_err("bad");
        assert_eq!(err.lines().count(), 2);
    }
}
