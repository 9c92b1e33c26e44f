//! librdkafka settings shared by every client tidemark creates.
//!
//! Users pass any librdkafka property with `-X key=value` or a properties file
//! (`--kafka-config FILE`, one `key=value` per line, `#` comments), which is how TLS and SASL
//! settings reach the clients. Values of secret-looking keys are never printed.

use std::path::Path;

use rdkafka::ClientConfig;

#[derive(Clone, Debug, Default)]
pub struct KafkaSettings {
    pub bootstrap: String,
    pub extra: Vec<(String, String)>,
}

impl KafkaSettings {
    pub fn new(bootstrap: &str) -> Self {
        KafkaSettings { bootstrap: bootstrap.to_string(), extra: Vec::new() }
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

    pub fn client_config(&self) -> ClientConfig {
        let mut c = ClientConfig::new();
        c.set("bootstrap.servers", &self.bootstrap);
        for (k, v) in &self.extra {
            c.set(k, v);
        }
        c
    }

    /// The settings as they may be logged: secrets replaced.
    pub fn redacted(&self) -> String {
        let mut parts = vec![format!("bootstrap.servers={}", self.bootstrap)];
        for (k, v) in &self.extra {
            let secret = ["password", "secret", "key", "token", "jaas"].iter().any(|s| k.contains(s));
            parts.push(format!("{k}={}", if secret { "<redacted>" } else { v }));
        }
        parts.join(" ")
    }
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
    fn malformed_pairs_are_all_reported() {
        let err = KafkaSettings::new("b").with_pairs(&["a".into(), "=b".into(), "c=d".into()]).expect_err("bad");
        assert_eq!(err.lines().count(), 2);
    }
}
