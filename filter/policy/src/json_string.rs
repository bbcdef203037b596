//! JSON strings, quoted, for the JSON the core writes by hand (the status page's JSON form, the
//! JSON log of changes, the bodies of etcd requests): written directly into the text, with no
//! serializer in the module.

use std::fmt::Write;

/// `s` as a JSON string, quoted and escaped.
pub fn quoted(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if u32::from(c) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_strings_escape_quotes_and_control_characters() {
        assert_eq!(quoted("a\"b\\c\nd"), r#""a\"b\\c\u000ad""#);
    }
}
