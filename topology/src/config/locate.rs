//! The first pass: the text read into raw structs, every type error located by key path
//! and line:column (toml_edit spans), each bad value stood in for so the rest is still read.

use super::raw::RawTopology;
use super::ConfigError;

/// Type errors found while reading the file into [`RawTopology`], all of them: serde stops at
/// the first, so each bad value is located (its key path from the error's span, its line and
/// column in the original text), replaced by a stand-in of the expected type, and the text is
/// read again. Returns the raw topology with the unknown keys when every type error could be
/// stood in for (the errors then hold the type errors), or `None` with what stopped it.
#[allow(clippy::type_complexity)]
pub(super) fn deserialize(text: &str) -> (Option<(RawTopology, Vec<String>)>, Vec<ConfigError>) {
    let original = toml_edit::ImDocument::parse(text).ok();
    let mut errors = Vec::new();
    let mut current = text.to_string();
    // Each round stands in for one value; a file has far fewer keys than this.
    for _ in 0..256 {
        let mut unknown = Vec::new();
        let e = match serde_ignored::deserialize(toml::Deserializer::new(&current), |p| unknown.push(p.to_string())) {
            Ok(raw) => return (Some((raw, unknown)), errors),
            Err(e) => e,
        };
        let message = e.message().trim().to_string();
        let doc = e.span().and_then(|_| toml_edit::ImDocument::parse(current.clone()).ok());
        let located = e.span().zip(doc.as_ref()).and_then(|(span, doc)| path_at(doc.as_table(), span.start));
        let Some(path) = located else {
            let line_col = e.span().map(|s| line_col(&current, s.start));
            errors.push(ConfigError { path: String::new(), line_col, message });
            return (None, errors);
        };
        let at = original.as_ref().and_then(|d| span_of(d.as_item(), &path)).map(|start| line_col(text, start));
        let line_col = at.or_else(|| e.span().map(|s| line_col(&current, s.start)));
        let stand_in = stand_in(&message);
        errors.push(ConfigError { path: display_path(&path), line_col, message });
        let (Some(stand_in), Some(doc)) = (stand_in, doc) else { return (None, errors) };
        let mut doc = doc.into_mut();
        if !replace(doc.as_item_mut(), &path, stand_in) {
            return (None, errors);
        }
        current = doc.to_string();
    }
    (None, errors)
}

/// One step of a key path: a key of a table, or an index into an array (of tables).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Step {
    Key(String),
    Index(usize),
}

pub(super) fn display_path(path: &[Step]) -> String {
    let mut out = String::new();
    for step in path {
        match step {
            Step::Key(k) if out.is_empty() => out.push_str(k),
            Step::Key(k) => {
                out.push('.');
                out.push_str(k);
            }
            Step::Index(i) => out.push_str(&format!("[{i}]")),
        }
    }
    out
}

fn contains(span: Option<std::ops::Range<usize>>, offset: usize) -> bool {
    span.is_some_and(|s| s.start <= offset && offset < s.end.max(s.start + 1))
}

/// The path of the innermost value whose span holds `offset`.
fn path_at(table: &toml_edit::Table, offset: usize) -> Option<Vec<Step>> {
    for (key, item) in table.iter() {
        let here = vec![Step::Key(key.to_string())];
        let found = match item {
            toml_edit::Item::Table(t) => path_at(t, offset),
            toml_edit::Item::ArrayOfTables(a) => a
                .iter()
                .enumerate()
                .find_map(|(i, t)| path_at(t, offset).map(|p| std::iter::once(Step::Index(i)).chain(p).collect())),
            toml_edit::Item::Value(v) => value_path_at(v, offset),
            toml_edit::Item::None => None,
        };
        if let Some(rest) = found {
            return Some(here.into_iter().chain(rest).collect());
        }
    }
    None
}

/// Within a value: `Some(vec![])` for the value itself, deeper steps inside arrays and
/// inline tables.
fn value_path_at(v: &toml_edit::Value, offset: usize) -> Option<Vec<Step>> {
    match v {
        toml_edit::Value::Array(a) => {
            let inner = a.iter().enumerate().find_map(|(i, v)| {
                value_path_at(v, offset).map(|p| std::iter::once(Step::Index(i)).chain(p).collect())
            });
            inner.or_else(|| contains(v.span(), offset).then(Vec::new))
        }
        toml_edit::Value::InlineTable(t) => {
            let inner = t.iter().find_map(|(k, v)| {
                value_path_at(v, offset).map(|p| std::iter::once(Step::Key(k.to_string())).chain(p).collect())
            });
            inner.or_else(|| contains(v.span(), offset).then(Vec::new))
        }
        _ => contains(v.span(), offset).then(Vec::new),
    }
}

/// Where the value at `path` starts in a parsed document.
fn span_of(root: &toml_edit::Item, path: &[Step]) -> Option<usize> {
    let mut item = root;
    for step in path {
        item = match step {
            Step::Key(k) => item.get(k.as_str())?,
            Step::Index(i) => item.get(*i)?,
        };
    }
    item.span().map(|s| s.start)
}

/// Sets the value at `path`; false when the path does not lead to a value.
fn replace(root: &mut toml_edit::Item, path: &[Step], value: toml_edit::Value) -> bool {
    let mut item = root;
    for step in path {
        let next = match step {
            Step::Key(k) => item.get_mut(k.as_str()),
            Step::Index(i) => item.get_mut(*i),
        };
        let Some(next) = next else { return false };
        item = next;
    }
    if item.is_value() {
        *item = toml_edit::Item::Value(value);
        true
    } else {
        false
    }
}

/// A value of the type a serde message says was expected (`invalid type: string "four",
/// expected i32`), or `None` when it names no plain type.
fn stand_in(message: &str) -> Option<toml_edit::Value> {
    if !(message.starts_with("invalid type") || message.starts_with("invalid value")) {
        return None;
    }
    let expected = message.rsplit_once("expected ")?.1;
    let integer = ["i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64", "usize", "isize", "integer"];
    if integer.iter().any(|t| expected.starts_with(t)) {
        Some(toml_edit::Value::from(0i64))
    } else if expected.starts_with("f32") || expected.starts_with("f64") || expected.contains("float") {
        Some(toml_edit::Value::from(0.0f64))
    } else if expected.contains("string") {
        Some(toml_edit::Value::from(""))
    } else if expected.contains("bool") {
        Some(toml_edit::Value::from(false))
    } else if expected.contains("sequence") {
        Some(toml_edit::Value::Array(toml_edit::Array::new()))
    } else {
        None
    }
}

fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let col = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, col)
}

/// The original text, parsed with spans, to place what the second pass finds inside a value.
pub(super) struct Source<'a> {
    text: &'a str,
    doc: Option<toml_edit::ImDocument<&'a str>>,
}

impl<'a> Source<'a> {
    pub(super) fn new(text: &'a str) -> Self {
        Source { text, doc: toml_edit::ImDocument::parse(text).ok() }
    }

    /// Line and column of the byte `offset` inside the string value at `path`: exact when
    /// the string is written without escapes, else the start of the value.
    pub(super) fn in_string(&self, path: &[Step], offset: usize) -> Option<(usize, usize)> {
        let doc = self.doc.as_ref()?;
        let start = span_of(doc.as_item(), path)?;
        let value = item_at(doc.as_item(), path)?.as_str()?;
        let raw = self.text.get(start..)?;
        let (delimiter, multi_line) = match raw.get(..3) {
            Some("\"\"\"") | Some("'''") => (3, true),
            _ => (1, false),
        };
        let mut content = start + delimiter;
        if multi_line {
            let rest = self.text.get(content..)?;
            content += if rest.starts_with("\r\n") { 2 } else { usize::from(rest.starts_with('\n')) };
        }
        let exact = self.text.get(content..).is_some_and(|t| t.starts_with(value)) && offset <= value.len();
        Some(line_col(self.text, if exact { content + offset } else { start }))
    }
}

fn item_at<'d>(root: &'d toml_edit::Item, path: &[Step]) -> Option<&'d toml_edit::Item> {
    let mut item = root;
    for step in path {
        item = match step {
            Step::Key(k) => item.get(k.as_str())?,
            Step::Index(i) => item.get(*i)?,
        };
    }
    Some(item)
}
