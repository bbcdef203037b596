//! A JSON reader just big enough for etcd's answers (the requests' strings are written by
//! [`crate::json_string::quoted`]).
//!
//! Why not serde_json's derive, as the configuration uses: every answer type derived for it
//! brings serde_json's deserializer paths of its own and float formatting for its error messages
//! into the module, about 40 KB more for V8 to load and compile in every Envoy process
//! (docs/build-profile.md), for answers this reader handles. etcd's answers need only
//! objects, arrays, strings and booleans (its int64s are strings); numbers are skipped unread.
//! Input is untrusted: nesting is bounded by [`MAX_DEPTH`], every index is checked, and anything
//! that is not JSON is an error, never a panic.

/// How deep an answer may nest (etcd's nest four levels at most).
pub const MAX_DEPTH: usize = 16;

/// A JSON value, numbers left unread.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Json {
    /// `null`.
    Null,
    /// `true` or `false`.
    Bool(bool),
    /// A number (not read: etcd writes its int64s as strings).
    Number,
    /// A string.
    Text(String),
    /// An array.
    List(Vec<Json>),
    /// An object, members in order.
    Object(Vec<(String, Json)>),
}

impl Json {
    /// The member `name` of an object.
    pub fn get(&self, name: &str) -> Option<&Json> {
        match self {
            Json::Object(members) => members.iter().find(|(k, _)| k == name).map(|(_, v)| v),
            _ => None,
        }
    }

    /// The text of a string.
    pub fn text(&self) -> Option<&str> {
        match self {
            Json::Text(text) => Some(text),
            _ => None,
        }
    }
}

/// Reads one JSON document.
pub fn parse(bytes: &[u8]) -> Result<Json, &'static str> {
    let mut reader = Reader { bytes, at: 0 };
    let value = reader.value(0)?;
    reader.space();
    if reader.at != bytes.len() {
        return Err("trailing characters after the JSON value");
    }
    Ok(value)
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.at).copied()
    }

    fn next(&mut self) -> Option<u8> {
        let b = self.peek()?;
        self.at += 1;
        Some(b)
    }

    fn space(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.at += 1;
        }
    }

    fn word(&mut self, word: &[u8], value: Json) -> Result<Json, &'static str> {
        match self.bytes.get(self.at..self.at + word.len()) {
            Some(found) if found == word => {
                self.at += word.len();
                Ok(value)
            }
            _ => Err("not JSON"),
        }
    }

    fn value(&mut self, depth: usize) -> Result<Json, &'static str> {
        if depth > MAX_DEPTH {
            return Err("nested too deep");
        }
        self.space();
        match self.peek() {
            Some(b'{') => self.object(depth),
            Some(b'[') => self.list(depth),
            Some(b'"') => self.string().map(Json::Text),
            Some(b't') => self.word(b"true", Json::Bool(true)),
            Some(b'f') => self.word(b"false", Json::Bool(false)),
            Some(b'n') => self.word(b"null", Json::Null),
            Some(b'-' | b'0'..=b'9') => self.number(),
            _ => Err("not JSON"),
        }
    }

    fn number(&mut self) -> Result<Json, &'static str> {
        let start = self.at;
        while matches!(
            self.peek(),
            Some(b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9')
        ) {
            self.at += 1;
        }
        if self.at == start {
            return Err("not JSON");
        }
        Ok(Json::Number)
    }

    fn list(&mut self, depth: usize) -> Result<Json, &'static str> {
        self.at += 1;
        let mut items = Vec::new();
        self.space();
        if self.peek() == Some(b']') {
            self.at += 1;
            return Ok(Json::List(items));
        }
        loop {
            items.push(self.value(depth + 1)?);
            self.space();
            match self.next() {
                Some(b',') => {}
                Some(b']') => return Ok(Json::List(items)),
                _ => return Err("a list not closed"),
            }
        }
    }

    fn object(&mut self, depth: usize) -> Result<Json, &'static str> {
        self.at += 1;
        let mut members = Vec::new();
        self.space();
        if self.peek() == Some(b'}') {
            self.at += 1;
            return Ok(Json::Object(members));
        }
        loop {
            self.space();
            if self.peek() != Some(b'"') {
                return Err("an object member without a name");
            }
            let name = self.string()?;
            self.space();
            if self.next() != Some(b':') {
                return Err("an object member without a value");
            }
            members.push((name, self.value(depth + 1)?));
            self.space();
            match self.next() {
                Some(b',') => {}
                Some(b'}') => return Ok(Json::Object(members)),
                _ => return Err("an object not closed"),
            }
        }
    }

    fn hex4(&mut self) -> Result<u32, &'static str> {
        let mut n = 0;
        for _ in 0..4 {
            let digit = self
                .next()
                .and_then(|b| char::from(b).to_digit(16))
                .ok_or("a bad \\u escape")?;
            n = n * 16 + digit;
        }
        Ok(n)
    }

    fn string(&mut self) -> Result<String, &'static str> {
        self.at += 1;
        let mut out = Vec::new();
        loop {
            match self.next().ok_or("a string not closed")? {
                b'"' => return String::from_utf8(out).map_err(|_| "a string that is not UTF-8"),
                b'\\' => {
                    let c = match self.next().ok_or("a string not closed")? {
                        b'"' => '"',
                        b'\\' => '\\',
                        b'/' => '/',
                        b'b' => '\u{8}',
                        b'f' => '\u{c}',
                        b'n' => '\n',
                        b'r' => '\r',
                        b't' => '\t',
                        b'u' => {
                            let mut n = self.hex4()?;
                            if (0xd800..0xdc00).contains(&n)
                                && self.bytes.get(self.at) == Some(&b'\\')
                            {
                                self.at += 1;
                                if self.next() != Some(b'u') {
                                    return Err("a bad \\u escape");
                                }
                                let low = self.hex4()?;
                                n = 0x10000
                                    + ((n - 0xd800) << 10)
                                    + (low.wrapping_sub(0xdc00) & 0x3ff);
                            }
                            char::from_u32(n).unwrap_or('\u{fffd}')
                        }
                        _ => return Err("a bad escape"),
                    };
                    let mut buf = [0; 4];
                    out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
                }
                b if b < 0x20 => return Err("a control character in a string"),
                b => out.push(b),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn etcds_answers_are_read_with_their_strings_and_booleans() {
        let v =
            parse(br#" {"a": {"b": ["x", true, null, -1.5e3]}, "c": "\u00e9\n\"", "d": false} "#)
                .unwrap();
        let list = v.get("a").and_then(|a| a.get("b")).unwrap();
        assert_eq!(
            list,
            &Json::List(vec![
                Json::Text("x".into()),
                Json::Bool(true),
                Json::Null,
                Json::Number
            ])
        );
        assert_eq!(v.get("c").and_then(Json::text), Some("é\n\""));
        assert_eq!(v.get("d"), Some(&Json::Bool(false)));
        assert_eq!(
            parse(br#""\ud83d\ude00""#).unwrap(),
            Json::Text("😀".into())
        );
    }

    #[test]
    fn what_is_not_json_is_an_error_never_a_panic() {
        for bad in [
            &b""[..],
            b"{",
            b"[1,",
            b"{\"a\" 1}",
            b"\"abc",
            b"\"\\x\"",
            b"\"\\u12\"",
            b"tru",
            b"{} x",
            b"\"\xff\"",
            b"{\"a\":\"\x01\"}",
        ] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
        let deep = "[".repeat(MAX_DEPTH + 2) + &"]".repeat(MAX_DEPTH + 2);
        assert_eq!(parse(deep.as_bytes()), Err("nested too deep"));
    }

    #[test]
    fn a_quoted_string_reads_back_as_it_was() {
        for text in ["plain", "q\"b\\s", "ctl\u{1}\n", "é😀"] {
            assert_eq!(
                parse(crate::json_string::quoted(text).as_bytes()),
                Ok(Json::Text(text.into()))
            );
        }
    }
}
