//! The second pass's error collector and the checks several sections share.

use super::locate::{display_path, Source, Step};
use super::raw::{RawCombinedTopic, RawTopic};
use super::{ConfigError, SinkFormat, TopicSpec};

/// Collects errors instead of stopping at the first.
pub(super) struct Checker<'a> {
    pub(super) errors: &'a mut Vec<ConfigError>,
    /// The text, to place errors found inside a string value (an expression).
    pub(super) source: &'a Source<'a>,
}

impl Checker<'_> {
    pub(super) fn error(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.errors.push(ConfigError { path: path.into(), line_col: None, message: message.into() });
    }

    /// An error at byte `offset` of the string value at `path`, with its line and column.
    pub(super) fn error_in_string(&mut self, path: &[Step], offset: usize, message: impl Into<String>) {
        let line_col = self.source.in_string(path, offset);
        self.errors.push(ConfigError { path: display_path(path), line_col, message: message.into() });
    }

    /// `None` (and an error) when the text is not a duration.
    pub(super) fn duration_ms(&mut self, path: &str, text: &str) -> Option<i64> {
        match humantime::parse_duration(text) {
            Ok(d) => Some(i64::try_from(d.as_millis()).unwrap_or(i64::MAX)),
            Err(e) => {
                self.error(path, format!("`{text}` is not a duration ({e}); write e.g. \"200ms\", \"2m\", \"7d\""));
                None
            }
        }
    }

    /// A duration that must be positive; one error per problem, never two for one key.
    pub(super) fn positive_ms(&mut self, path: &str, text: &str) -> Option<i64> {
        let ms = self.duration_ms(path, text)?;
        if ms <= 0 {
            self.error(path, "must be positive");
            return None;
        }
        Some(ms)
    }

    pub(super) fn topic(&mut self, path: &str, raw: RawTopic) -> TopicSpec {
        if raw.topic.trim().is_empty() || raw.topic.len() > 249 || !raw.topic.chars().all(valid_topic_char) {
            self.error(format!("{path}.topic"), format!("`{}` is not a valid Kafka topic name", raw.topic));
        }
        if raw.partitions < 1 {
            self.error(format!("{path}.partitions"), "must be at least 1");
        }
        TopicSpec { topic: raw.topic, partitions: raw.partitions, compacted: raw.compacted }
    }

    /// A combined sink's topic and format.
    pub(super) fn combined(&mut self, path: &str, raw: RawCombinedTopic) -> (TopicSpec, SinkFormat) {
        let format = raw.format.parse::<SinkFormat>().unwrap_or_else(|e| {
            self.error(format!("{path}.format"), e.to_string());
            SinkFormat::default()
        });
        let topic = RawTopic { topic: raw.topic, partitions: raw.partitions, compacted: raw.compacted };
        (self.topic(path, topic), format)
    }
}

fn valid_topic_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')
}
