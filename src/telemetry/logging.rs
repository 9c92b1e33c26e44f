//! The process's log output on stderr: text for people (the default), or one JSON object
//! per line for Loki, Elasticsearch and other collectors (`--log-format json`).

use std::fmt;

use serde_json::{Map, Value};
use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// `2026-11-28T14:59:59.120Z  INFO target: message key=value`.
    #[default]
    Text,
    /// `{"timestamp":"…","level":"INFO","target":"…","message":"…","key":value,…}`; the
    /// names of the spans the event is in, outermost first, under `spans`.
    Json,
}

/// Installs the global subscriber: `filter` in tracing's EnvFilter syntax (`info` when it
/// does not parse), written to stderr in `format`.
pub fn init(filter: &str, format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_new(filter).unwrap_or_else(|_| "info".into());
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr())).init(),
        LogFormat::Json => builder.with_ansi(false).event_format(Json).init(),
    }
}

/// One JSON object per event.
pub struct Json;

impl<S, N> FormatEvent<S, N> for Json
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(&self, ctx: &FmtContext<'_, S, N>, mut writer: Writer<'_>, event: &Event<'_>) -> fmt::Result {
        let meta = event.metadata();
        let mut line = Map::new();
        let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Micros, true);
        line.insert("timestamp".into(), Value::String(now));
        line.insert("level".into(), Value::String(meta.level().as_str().to_string()));
        line.insert("target".into(), Value::String(meta.target().to_string()));
        event.record(&mut Fields(&mut line));
        if let Some(scope) = ctx.event_scope() {
            let spans: Vec<Value> = scope.from_root().map(|s| Value::String(s.name().to_string())).collect();
            line.insert("spans".into(), Value::Array(spans));
        }
        writeln!(writer, "{}", Value::Object(line))
    }
}

/// Event fields as JSON values: numbers and booleans as such, everything else as text.
struct Fields<'a>(&'a mut Map<String, Value>);

impl Fields<'_> {
    fn put(&mut self, field: &Field, value: Value) {
        // A field named like one of the line's own keys keeps both: the field gets a prefix.
        let name = match field.name() {
            n @ ("timestamp" | "level" | "target" | "spans") => format!("field.{n}"),
            n => n.to_string(),
        };
        self.0.insert(name, value);
    }
}

impl Visit for Fields<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.put(field, Value::String(format!("{value:?}")));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.put(field, Value::String(value.to_string()));
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.put(field, Value::from(value));
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.put(field, Value::from(value));
    }
    fn record_f64(&mut self, field: &Field, value: f64) {
        self.put(field, Value::from(value));
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.put(field, Value::Bool(value));
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::Json;

    #[derive(Clone, Default)]
    struct Buffer(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Buffer {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().map_err(|_| std::io::Error::other("poisoned"))?.extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_json_log_line_holds_level_target_message_and_typed_fields() {
        let buffer = Buffer::default();
        let writer = buffer.clone();
        let subscriber = tracing_subscriber::fmt().with_writer(move || writer.clone()).event_format(Json).finish();
        tracing::subscriber::with_default(subscriber, || {
            let span = tracing::info_span!("commit");
            let _in = span.enter();
            tracing::warn!(partition = 3, caught_up = false, topic = "orders", "backlog rising");
        });
        let text = String::from_utf8(buffer.0.lock().expect("buffer").clone()).expect("utf-8");
        let line: serde_json::Value = serde_json::from_str(text.trim()).expect("one JSON object");
        assert_eq!(line["level"], "WARN");
        assert_eq!(line["message"], "backlog rising");
        assert_eq!(line["partition"], 3);
        assert_eq!(line["caught_up"], false);
        assert_eq!(line["topic"], "orders");
        assert_eq!(line["spans"], serde_json::json!(["commit"]));
        assert!(line["timestamp"].as_str().is_some_and(|t| t.ends_with('Z')), "{line}");
    }
}
