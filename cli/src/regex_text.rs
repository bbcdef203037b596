//! Caddy's `expect_body` is a Go regular expression; upcheck's is a plain substring.
//!
//! A regular expression without metacharacters matches exactly where its text occurs, so it
//! moves over as that text, with a backslash before an ASCII character other than a letter or a
//! digit read as the character itself, as Go does (`version 1\.2` is the text `version 1.2`). Any other expression is refused, never
//! approximated: `^ok$` is not "contains ok", and a probe that passed in Caddy must not fail in
//! Envoy or the other way round.

/// The text a Go regular expression matches, when it matches that text and nothing else; else the
/// first metacharacter, as written.
pub fn plain_text(regex: &str) -> Result<String, String> {
    let mut text = String::new();
    let mut chars = regex.char_indices();
    while let Some((at, c)) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some((_, escaped)) if escaped.is_ascii() && !escaped.is_ascii_alphanumeric() => {
                    text.push(escaped)
                }
                Some((_, escaped)) => return Err(format!("\\{escaped}")),
                None => return Err("\\".into()),
            },
            '.' | '^' | '$' | '*' | '+' | '?' | '(' | ')' | '[' | '|' => return Err(c.into()),
            // Go reads `{` as a repetition only in `{n}`, `{n,}` or `{n,m}`; otherwise it is
            // itself, as in a JSON body's `{"status":"ok"}`.
            '{' if repetition(&regex[at + 1..]) => return Err(c.into()),
            c => text.push(c),
        }
    }
    Ok(text)
}

/// Whether `rest` (what follows a `{`) makes it a repetition: digits, optionally a comma and more
/// digits, then `}`.
fn repetition(rest: &str) -> bool {
    let Some((inside, _)) = rest.split_once('}') else {
        return false;
    };
    let (min, max) = inside.split_once(',').unwrap_or((inside, "0"));
    let digits = |s: &str| s.chars().all(|c| c.is_ascii_digit());
    !min.is_empty() && digits(min) && digits(max)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_text_is_its_own_text() {
        assert_eq!(plain_text("ok"), Ok("ok".into()));
        assert_eq!(
            plain_text("all good, 200 OK"),
            Ok("all good, 200 OK".into())
        );
        assert_eq!(
            plain_text(r#"{"status":"ok"}"#),
            Ok(r#"{"status":"ok"}"#.into())
        );
        assert_eq!(plain_text("a]b}c"), Ok("a]b}c".into()));
    }

    #[test]
    fn an_escaped_character_other_than_a_letter_or_digit_is_itself() {
        assert_eq!(plain_text(r"version 1\.2"), Ok("version 1.2".into()));
        assert_eq!(plain_text(r"\(ok\)\\"), Ok(r"(ok)\".into()));
        assert_eq!(plain_text(r"all\ good"), Ok("all good".into()));
    }

    #[test]
    fn a_metacharacter_is_named_as_written() {
        assert_eq!(plain_text("^ok$"), Err("^".into()));
        assert_eq!(plain_text("ok|fine"), Err("|".into()));
        assert_eq!(plain_text("1.2"), Err(".".into()));
        assert_eq!(plain_text("(?i)ok"), Err("(".into()));
        assert_eq!(plain_text("[Oo][Kk]"), Err("[".into()));
        assert_eq!(plain_text(r"\d+"), Err(r"\d".into()));
        assert_eq!(plain_text(r"ok\"), Err(r"\".into()));
    }

    #[test]
    fn a_brace_is_a_metacharacter_only_where_go_reads_a_repetition() {
        assert_eq!(plain_text("o{2}"), Err("{".into()));
        assert_eq!(plain_text("o{2,}"), Err("{".into()));
        assert_eq!(plain_text("o{2,5}"), Err("{".into()));
        assert_eq!(plain_text("o{,5}"), Ok("o{,5}".into()));
        assert_eq!(plain_text("{x}"), Ok("{x}".into()));
        assert_eq!(plain_text("{"), Ok("{".into()));
    }
}
