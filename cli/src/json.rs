//! A small JSON reader for the plugin configuration.
//!
//! upcheck.wasm is loaded into every proxy worker and has a size budget; a general-purpose JSON
//! library (with its float formatting, its map type and its serializer) took a tenth of it to
//! read one small document once. This reader does only what the configuration needs: it parses
//! RFC 8259 JSON into a [`Json`] value, keeps object members in document order, refuses
//! duplicate keys (a config with two `max_fails` is a mistake, not a choice), limits nesting
//! (hostile input must not exhaust the stack: a stack overflow would kill the VM), and reports
//! where a document is broken.

use std::fmt;

/// A JSON value.
#[derive(Debug, Clone, PartialEq)]
pub enum Json {
    /// `null`
    Null,
    /// `true` / `false`
    Bool(bool),
    /// A number.
    Number(Number),
    /// A string.
    String(String),
    /// An array.
    Array(Vec<Json>),
    /// An object, members in document order, keys unique.
    Object(Vec<(String, Json)>),
}

/// A JSON number, as far as the configuration cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Number {
    /// A whole number ≥ 0 that fits in 64 bits.
    Unsigned(u64),
    /// A whole number < 0 that fits in 64 bits.
    Negative(i64),
    /// A number with a fraction or an exponent.
    Fraction,
    /// A whole number too large for 64 bits.
    Huge,
}

impl Json {
    /// The member `key` of an object.
    pub fn get(&self, key: &str) -> Option<&Json> {
        match self {
            Json::Object(members) => members.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }
}

/// Where and why a document is not JSON.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JsonError {
    /// 1-based line.
    pub line: usize,
    /// 1-based column (in bytes).
    pub column: usize,
    /// What was wrong there.
    pub reason: &'static str,
}

impl fmt::Display for JsonError {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(
            f,
            "{} at line {} column {}",
            self.reason, self.line, self.column
        )
    }
}

/// How deeply arrays and objects may nest.
pub const MAX_DEPTH: usize = 64;

/// Parses one JSON document (surrounding whitespace allowed, nothing else).
pub fn parse(text: &[u8]) -> Result<Json, JsonError> {
    let mut p = Parser { text, at: 0 };
    let value = p.value(0)?;
    p.skip_space();
    if p.at < text.len() {
        return Err(p.error("trailing characters after the document"));
    }
    Ok(value)
}

struct Parser<'a> {
    text: &'a [u8],
    at: usize,
}

impl Parser<'_> {
    fn error(&self, reason: &'static str) -> JsonError {
        let before = self.text.get(..self.at).unwrap_or(self.text);
        let line = before.iter().filter(|b| **b == b'\n').count() + 1;
        let column = before.iter().rev().take_while(|b| **b != b'\n').count() + 1;
        JsonError {
            line,
            column,
            reason,
        }
    }

    fn peek(&self) -> Option<u8> {
        self.text.get(self.at).copied()
    }

    fn next(&mut self) -> Option<u8> {
        let b = self.peek()?;
        self.at += 1;
        Some(b)
    }

    fn skip_space(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.at += 1;
        }
    }

    fn expect(&mut self, byte: u8, reason: &'static str) -> Result<(), JsonError> {
        self.skip_space();
        if self.peek() == Some(byte) {
            self.at += 1;
            Ok(())
        } else {
            Err(self.error(reason))
        }
    }

    fn literal(&mut self, word: &[u8], value: Json) -> Result<Json, JsonError> {
        if self.text.get(self.at..self.at + word.len()) == Some(word) {
            self.at += word.len();
            Ok(value)
        } else {
            Err(self.error("expected a value"))
        }
    }

    fn value(&mut self, depth: usize) -> Result<Json, JsonError> {
        self.skip_space();
        match self.peek() {
            Some(b'{') => self.object(depth + 1),
            Some(b'[') => self.array(depth + 1),
            Some(b'"') => self.string().map(Json::String),
            Some(b't') => self.literal(b"true", Json::Bool(true)),
            Some(b'f') => self.literal(b"false", Json::Bool(false)),
            Some(b'n') => self.literal(b"null", Json::Null),
            Some(b'-' | b'0'..=b'9') => self.number().map(Json::Number),
            Some(_) => Err(self.error("expected a value")),
            None => Err(self.error("unexpected end of the document")),
        }
    }

    fn object(&mut self, depth: usize) -> Result<Json, JsonError> {
        if depth > MAX_DEPTH {
            return Err(self.error("nested too deeply"));
        }
        self.at += 1; // {
        let mut members: Vec<(String, Json)> = Vec::new();
        self.skip_space();
        if self.peek() == Some(b'}') {
            self.at += 1;
            return Ok(Json::Object(members));
        }
        loop {
            self.skip_space();
            if self.peek() != Some(b'"') {
                return Err(self.error("expected a member name in double quotes"));
            }
            let key_at = self.at;
            let key = self.string()?;
            if members.iter().any(|(k, _)| *k == key) {
                self.at = key_at;
                return Err(self.error("duplicate member name"));
            }
            self.expect(b':', "expected `:` after a member name")?;
            let value = self.value(depth)?;
            members.push((key, value));
            self.skip_space();
            match self.peek() {
                Some(b',') => self.at += 1,
                Some(b'}') => {
                    self.at += 1;
                    return Ok(Json::Object(members));
                }
                _ => return Err(self.error("expected `,` or `}` in an object")),
            }
        }
    }

    fn array(&mut self, depth: usize) -> Result<Json, JsonError> {
        if depth > MAX_DEPTH {
            return Err(self.error("nested too deeply"));
        }
        self.at += 1; // [
        let mut items = Vec::new();
        self.skip_space();
        if self.peek() == Some(b']') {
            self.at += 1;
            return Ok(Json::Array(items));
        }
        loop {
            items.push(self.value(depth)?);
            self.skip_space();
            match self.peek() {
                Some(b',') => self.at += 1,
                Some(b']') => {
                    self.at += 1;
                    return Ok(Json::Array(items));
                }
                _ => return Err(self.error("expected `,` or `]` in an array")),
            }
        }
    }

    fn hex4(&mut self) -> Result<u32, JsonError> {
        let digits = self
            .text
            .get(self.at..self.at + 4)
            .and_then(|d| std::str::from_utf8(d).ok())
            .and_then(|d| u32::from_str_radix(d, 16).ok())
            .ok_or_else(|| self.error("expected four hex digits after \\u"))?;
        self.at += 4;
        Ok(digits)
    }

    fn string(&mut self) -> Result<String, JsonError> {
        self.at += 1; // "
        let mut out: Vec<u8> = Vec::new();
        loop {
            let start = self.at;
            while matches!(self.peek(), Some(b) if b != b'"' && b != b'\\' && b >= 0x20) {
                self.at += 1;
            }
            out.extend_from_slice(self.text.get(start..self.at).unwrap_or_default());
            match self.next() {
                Some(b'"') => break,
                Some(b'\\') => {
                    let c = match self.next() {
                        Some(b'"') => '"',
                        Some(b'\\') => '\\',
                        Some(b'/') => '/',
                        Some(b'b') => '\u{8}',
                        Some(b'f') => '\u{c}',
                        Some(b'n') => '\n',
                        Some(b'r') => '\r',
                        Some(b't') => '\t',
                        Some(b'u') => self.escaped_char()?,
                        _ => return Err(self.error("unknown escape in a string")),
                    };
                    let mut buf = [0; 4];
                    out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
                }
                Some(_) => {
                    self.at = self.at.saturating_sub(1);
                    return Err(self.error("control character in a string"));
                }
                None => return Err(self.error("unterminated string")),
            }
        }
        String::from_utf8(out).map_err(|_| self.error("a string is not UTF-8"))
    }

    /// The character of a `\uXXXX` escape (the `\u` read), joining a surrogate pair.
    fn escaped_char(&mut self) -> Result<char, JsonError> {
        let first = self.hex4()?;
        let code = if (0xD800..0xDC00).contains(&first) {
            if self.text.get(self.at..self.at + 2) != Some(b"\\u") {
                return Err(self.error("unpaired surrogate in a string"));
            }
            self.at += 2;
            let second = self.hex4()?;
            if !(0xDC00..0xE000).contains(&second) {
                return Err(self.error("unpaired surrogate in a string"));
            }
            0x10000 + ((first - 0xD800) << 10) + (second - 0xDC00)
        } else {
            first
        };
        char::from_u32(code).ok_or_else(|| self.error("unpaired surrogate in a string"))
    }

    fn number(&mut self) -> Result<Number, JsonError> {
        let start = self.at;
        let negative = self.peek() == Some(b'-');
        if negative {
            self.at += 1;
        }
        let digits_at = self.at;
        while matches!(self.peek(), Some(b'0'..=b'9')) {
            self.at += 1;
        }
        let digits = self.text.get(digits_at..self.at).unwrap_or_default();
        if digits.is_empty() || (digits.len() > 1 && digits.first() == Some(&b'0')) {
            self.at = start;
            return Err(self.error("malformed number"));
        }
        let mut whole = true;
        if self.peek() == Some(b'.') {
            whole = false;
            self.at += 1;
            if !matches!(self.peek(), Some(b'0'..=b'9')) {
                return Err(self.error("malformed number"));
            }
            while matches!(self.peek(), Some(b'0'..=b'9')) {
                self.at += 1;
            }
        }
        if matches!(self.peek(), Some(b'e' | b'E')) {
            whole = false;
            self.at += 1;
            if matches!(self.peek(), Some(b'+' | b'-')) {
                self.at += 1;
            }
            if !matches!(self.peek(), Some(b'0'..=b'9')) {
                return Err(self.error("malformed number"));
            }
            while matches!(self.peek(), Some(b'0'..=b'9')) {
                self.at += 1;
            }
        }
        if !whole {
            return Ok(Number::Fraction);
        }
        let text =
            std::str::from_utf8(self.text.get(start..self.at).unwrap_or_default()).unwrap_or("");
        Ok(if negative {
            text.parse::<i64>().map_or(Number::Huge, Number::Negative)
        } else {
            text.parse::<u64>().map_or(Number::Huge, Number::Unsigned)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(text: &str) -> Json {
        parse(text.as_bytes()).unwrap_or_else(|e| panic!("{text}: {e}"))
    }

    fn err(text: &str) -> String {
        match parse(text.as_bytes()) {
            Ok(v) => panic!("{text} parsed as {v:?}"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn every_kind_of_value_is_read() {
        let v = ok(
            r#" {"a": [1, -2, 1.5, 1e3, 18446744073709551616], "b": {"c": null},
                       "d": true, "e": false, "f": "x\"\\\/\b\f\n\r\t\u00e9\ud83d\ude00"} "#,
        );
        assert_eq!(
            v.get("a"),
            Some(&Json::Array(vec![
                Json::Number(Number::Unsigned(1)),
                Json::Number(Number::Negative(-2)),
                Json::Number(Number::Fraction),
                Json::Number(Number::Fraction),
                Json::Number(Number::Huge),
            ]))
        );
        assert_eq!(v.get("b").and_then(|b| b.get("c")), Some(&Json::Null));
        assert_eq!(v.get("d"), Some(&Json::Bool(true)));
        assert_eq!(v.get("e"), Some(&Json::Bool(false)));
        assert_eq!(
            v.get("f"),
            Some(&Json::String("x\"\\/\u{8}\u{c}\n\r\té😀".into()))
        );
        assert_eq!(ok("[]"), Json::Array(vec![]));
        assert_eq!(ok("{}"), Json::Object(vec![]));
        assert_eq!(ok("\"ü\""), Json::String("ü".into()));
    }

    #[test]
    fn broken_documents_say_what_and_where() {
        assert_eq!(
            err("{\"a\": 1,\n \"b\" 2}"),
            "expected `:` after a member name at line 2 column 6"
        );
        assert_eq!(
            err(r#"{"a": 1, "a": 2}"#),
            "duplicate member name at line 1 column 10"
        );
        assert_eq!(
            err("[1, 2"),
            "expected `,` or `]` in an array at line 1 column 6"
        );
        assert_eq!(
            err("{} x"),
            "trailing characters after the document at line 1 column 4"
        );
        assert_eq!(err(""), "unexpected end of the document at line 1 column 1");
        assert_eq!(err("[01]"), "malformed number at line 1 column 2");
        assert_eq!(err("[1.]"), "malformed number at line 1 column 4");
        assert_eq!(
            err("\"a\nb\""),
            "control character in a string at line 1 column 3"
        );
        assert_eq!(
            err(r#""\ud800x""#),
            "unpaired surrogate in a string at line 1 column 8"
        );
        assert_eq!(
            err(r#""\q""#),
            "unknown escape in a string at line 1 column 4"
        );
        assert_eq!(err("[tru]"), "expected a value at line 1 column 2");
        assert_eq!(
            err("{1: 2}"),
            "expected a member name in double quotes at line 1 column 2"
        );
        assert_eq!(err("\"abc"), "unterminated string at line 1 column 5");
    }

    #[test]
    fn deep_nesting_is_refused_instead_of_exhausting_the_stack() {
        let deep = "[".repeat(100_000);
        assert!(err(&deep).starts_with("nested too deeply"));
        let fine = format!("{}{}", "[".repeat(MAX_DEPTH), "]".repeat(MAX_DEPTH));
        assert!(parse(fine.as_bytes()).is_ok());
    }

    #[test]
    fn invalid_utf8_in_a_string_is_refused() {
        assert!(parse(b"\"\xff\"").is_err());
    }
}
