//! A configuration tree that prints two ways: as commented YAML for the people who read and edit
//! `envoy.yaml`, and as JSON for an Envoy that reads it from files (the e2e harness's xDS).
//!
//! One tree, so each setting is stated once and both outputs carry it: the comments and the
//! layout (a short mapping on one line, `{ prefix: "/" }`; the plugin configuration as a block
//! scalar) are what YAML adds, and JSON leaves out. A node's note is the comment above it, its
//! tail the comment after it on its line, and a gap the blank line before it.

use std::fmt::Write as _;

use serde_json::Value;

/// Where comments are wrapped.
pub const WIDTH: usize = 100;

/// One value of the configuration, with what YAML shows around it.
#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    kind: Kind,
    note: Option<String>,
    tail: Option<String>,
    gap: bool,
}

#[derive(Debug, Clone, PartialEq)]
enum Kind {
    /// A string, written as [`Style`] says.
    Text(String, Style),
    Number(u64),
    /// A multi-line string, in YAML a `|` block scalar: one line of the text to a line.
    Lines(String),
    /// A mapping in document order; `true`: on one line (`{ a: 1, b: 2 }`).
    Map(Vec<(String, Node)>, bool),
    /// A sequence; `true`: on one line (`[a, b]`).
    List(Vec<Node>, bool),
}

/// How YAML writes a string.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Style {
    /// Plain when YAML reads it back as the same string, else double-quoted ([`scalar`]).
    Auto,
    /// Always double-quoted.
    Quoted,
    /// As it is: for the constants this code writes that YAML reads as strings (`1s`).
    Plain,
}

/// A string: plain in YAML when it reads back as the same string, else quoted.
pub fn text(text: impl Into<String>) -> Node {
    Node::of(Kind::Text(text.into(), Style::Auto))
}

/// A string YAML always writes double-quoted, e.g. `"/"`.
pub fn double_quoted(text: impl Into<String>) -> Node {
    Node::of(Kind::Text(text.into(), Style::Quoted))
}

/// A string this code forms itself that YAML reads as written, never quoted: `1s`,
/// `connect-failure,refused-stream`.
pub fn plain(text: impl Into<String>) -> Node {
    Node::of(Kind::Text(text.into(), Style::Plain))
}

/// A number.
pub fn number(n: u64) -> Node {
    Node::of(Kind::Number(n))
}

/// A multi-line string, in YAML a block scalar (which reads back with one final line break more,
/// which the JSON it holds does not mind).
pub fn lines(text: &str) -> Node {
    Node::of(Kind::Lines(text.to_owned()))
}

/// A mapping of `entries`, in this order, one entry to a line.
pub fn map<K: Into<String>>(entries: impl IntoIterator<Item = (K, Node)>) -> Node {
    let entries = entries.into_iter().map(|(k, v)| (k.into(), v)).collect();
    Node::of(Kind::Map(entries, false))
}

/// A sequence of `items`, one item to a line.
pub fn list(items: impl IntoIterator<Item = Node>) -> Node {
    Node::of(Kind::List(items.into_iter().collect(), false))
}

impl Node {
    fn of(kind: Kind) -> Node {
        Node {
            kind,
            note: None,
            tail: None,
            gap: false,
        }
    }

    /// The comment above this node (wrapped at [`WIDTH`], see [`comment`]).
    pub fn note(mut self, text: impl Into<String>) -> Node {
        self.note = Some(text.into());
        self
    }

    /// A comment after this node on its line (for a value written on one line).
    pub fn tail(mut self, text: impl Into<String>) -> Node {
        self.tail = Some(text.into());
        self
    }

    /// A blank line before this node.
    pub fn gap(mut self) -> Node {
        self.gap = true;
        self
    }

    /// This mapping with `key: value` as its first entry (anything else as it is): how an xDS
    /// resource is typed, `"@type"` first.
    pub fn first(mut self, key: &str, value: Node) -> Node {
        if let Kind::Map(entries, _) = &mut self.kind {
            entries.insert(0, (key.to_owned(), value));
        }
        self
    }

    /// This mapping or sequence written on one line, `{ a: 1 }` or `[a]`.
    pub fn flow(mut self) -> Node {
        match &mut self.kind {
            Kind::Map(_, flow) | Kind::List(_, flow) => *flow = true,
            _ => {}
        }
        self
    }

    /// The same configuration as JSON, comments and layout left out.
    pub fn json(&self) -> Value {
        match &self.kind {
            Kind::Text(text, _) => Value::String(text.clone()),
            Kind::Number(n) => Value::from(*n),
            Kind::Lines(text) => Value::String(text.clone()),
            Kind::Map(entries, _) => {
                Value::Object(entries.iter().map(|(k, v)| (k.clone(), v.json())).collect())
            }
            Kind::List(items, _) => Value::Array(items.iter().map(Node::json).collect()),
        }
    }

    /// The YAML of this mapping as a whole document.
    pub fn yaml(&self) -> String {
        let mut out = String::new();
        if let Kind::Map(entries, _) = &self.kind {
            write_entries(&mut out, entries, 0, false);
        }
        out
    }

    /// Written on one line (a scalar, or a mapping or sequence in flow style).
    fn inline(&self) -> Option<String> {
        match &self.kind {
            Kind::Text(text, Style::Auto) => Some(scalar(text)),
            Kind::Text(text, Style::Quoted) => Some(quote(text)),
            Kind::Text(text, Style::Plain) => Some(text.clone()),
            Kind::Number(n) => Some(n.to_string()),
            Kind::Map(entries, true) => {
                let inner: Vec<String> = entries
                    .iter()
                    .map(|(k, v)| format!("{}: {}", key(k), v.inline().unwrap_or_default()))
                    .collect();
                Some(format!("{{ {} }}", inner.join(", ")))
            }
            Kind::List(items, true) => {
                let inner: Vec<String> = items.iter().filter_map(Node::inline).collect();
                Some(format!("[{}]", inner.join(", ")))
            }
            _ => None,
        }
    }

    fn tail_text(&self) -> String {
        self.tail
            .as_deref()
            .map(|t| format!(" # {}", visible(t)))
            .unwrap_or_default()
    }
}

/// The entries of a block mapping at `indent`; `dashed`: the first one starts a sequence item,
/// after `- ` two columns to the left.
fn write_entries(out: &mut String, entries: &[(String, Node)], indent: usize, dashed: bool) {
    for (i, (k, v)) in entries.iter().enumerate() {
        if v.gap {
            out.push('\n');
        }
        if let Some(note) = &v.note {
            comment(out, indent, note);
        }
        let lead = if dashed && i == 0 {
            format!("{}- ", " ".repeat(indent.saturating_sub(2)))
        } else {
            " ".repeat(indent)
        };
        let k = key(k);
        if let Some(inline) = v.inline() {
            let _ = writeln!(out, "{lead}{k}: {inline}{}", v.tail_text());
            continue;
        }
        match &v.kind {
            Kind::Lines(text) => {
                let _ = writeln!(out, "{lead}{k}: |");
                for line in text.lines() {
                    let _ = writeln!(out, "{}{line}", " ".repeat(indent + 2));
                }
            }
            Kind::Map(inner, _) => {
                let _ = writeln!(out, "{lead}{k}:");
                write_entries(out, inner, indent + 2, false);
            }
            Kind::List(items, _) => {
                let _ = writeln!(out, "{lead}{k}:");
                write_items(out, items, indent + 2);
            }
            Kind::Text(..) | Kind::Number(_) => {}
        }
    }
}

/// The items of a block sequence, each `- ` at `indent`.
fn write_items(out: &mut String, items: &[Node], indent: usize) {
    for item in items {
        if item.gap {
            out.push('\n');
        }
        if let Some(note) = &item.note {
            comment(out, indent, note);
        }
        match (&item.kind, item.inline()) {
            (_, Some(inline)) => {
                let _ = writeln!(out, "{}- {inline}{}", " ".repeat(indent), item.tail_text());
            }
            (Kind::Map(entries, _), None) => write_entries(out, entries, indent + 2, true),
            _ => {}
        }
    }
}

/// A mapping key: double-quoted when YAML would read it otherwise (`"@type"`).
fn key(k: &str) -> String {
    if k.starts_with('@') {
        quote(k)
    } else {
        k.to_owned()
    }
}

fn quote(text: &str) -> String {
    Value::String(text.to_owned()).to_string()
}

/// A YAML scalar that reads back as the string `text`: plain when it plainly is one (names,
/// IPv4 addresses, paths, type URLs), else double-quoted with JSON's escapes, which YAML shares.
pub fn scalar(text: &str) -> String {
    let safe_chars = text
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '/' | '-'));
    let starts_well = text.starts_with(|c: char| c.is_ascii_alphabetic() || c == '/')
        || (text.starts_with(|c: char| c.is_ascii_digit()) && text.contains('.'));
    let lower = text.to_ascii_lowercase();
    let special = text.parse::<f64>().is_ok()
        || ["true", "false", "null", "yes", "no", "on", "off", "y", "n"].contains(&lower.as_str());
    if safe_chars && starts_well && !special {
        text.to_owned()
    } else {
        quote(text)
    }
}

/// Writes `text` as comment lines at `indent`, wrapped at [`WIDTH`]: a `\n` ends a paragraph,
/// an empty line is a bare `#`, and a line starting with two spaces is kept as it is (a
/// command). Characters YAML could read as a line break are escaped.
pub fn comment(out: &mut String, indent: usize, text: &str) {
    let pad = " ".repeat(indent);
    for line in text.split('\n') {
        if line.is_empty() {
            let _ = writeln!(out, "{pad}#");
            continue;
        }
        if line.starts_with("  ") {
            let _ = writeln!(out, "{pad}# {}", visible(line));
            continue;
        }
        let mut current = String::new();
        for word in line.split_whitespace().map(visible) {
            if !current.is_empty() && indent + 2 + current.len() + 1 + word.len() > WIDTH {
                let _ = writeln!(out, "{pad}# {current}");
                current.clear();
            }
            if !current.is_empty() {
                current.push(' ');
            }
            current.push_str(&word);
        }
        if !current.is_empty() {
            let _ = writeln!(out, "{pad}# {current}");
        }
    }
}

/// `text` with control characters (and the other characters YAML 1.1 reads as line breaks)
/// escaped.
fn visible(text: &str) -> String {
    text.chars()
        .map(|c| {
            if c.is_control() || matches!(c, '\u{2028}' | '\u{2029}' | '\u{feff}') {
                c.escape_unicode().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_scalars_are_only_those_yaml_reads_as_the_same_string() {
        for plain in [
            "127.0.0.1",
            "app1",
            "x-upcheck-upstream",
            "/etc/upcheck/upcheck.wasm",
        ] {
            assert_eq!(scalar(plain), plain);
        }
        for quoted in [
            "::1", "3001", "1.5", "true", "No", "0x1F", "a b", "a#b", "-x", "",
        ] {
            assert!(
                scalar(quoted).starts_with('"'),
                "{quoted}: {}",
                scalar(quoted)
            );
        }
    }

    #[test]
    fn comments_wrap_at_the_width_and_keep_commands_and_paragraphs() {
        let mut out = String::new();
        let long = "word ".repeat(40);
        comment(
            &mut out,
            4,
            &format!("{long}\n\n  envoy -c envoy.yaml\nend"),
        );
        let lines: Vec<&str> = out.lines().collect();
        assert!(lines
            .iter()
            .all(|l| l.len() <= WIDTH && l.starts_with("    #")));
        assert!(lines.contains(&"    #"));
        assert!(lines.contains(&"    #   envoy -c envoy.yaml"));
        assert_eq!(lines.last(), Some(&"    # end"));
    }

    proptest::proptest! {
        #[test]
        fn no_text_from_the_input_ever_leaves_a_comment(text in "\\PC*|[\\s\\S]{0,300}", indent in 0usize..40) {
            let mut out = String::new();
            comment(&mut out, indent, &text);
            let pad = " ".repeat(indent);
            for line in out.lines() {
                proptest::prop_assert!(line.starts_with(&format!("{pad}#")), "{:?}", line);
            }
            let breaks = |c: char| matches!(c, '\n' | '\r' | '\u{85}' | '\u{2028}' | '\u{2029}');
            proptest::prop_assert!(!out.trim_end_matches('\n').contains(|c: char| breaks(c) && c != '\n'));
        }
    }

    #[test]
    fn a_line_break_from_the_input_never_leaves_a_comment() {
        let mut out = String::new();
        comment(&mut out, 0, "a\rb\u{1}c\u{2028}d\n  e\u{85}f");
        assert_eq!(out, "# a b\\u{1}c d\n#   e\\u{85}f\n");
    }
}
