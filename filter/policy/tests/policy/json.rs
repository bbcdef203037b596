//! The configuration's JSON layer: what serde_json and the readers refuse before any field is
//! judged, and that hostile documents cost time and stack in proportion to their size.

use upcheck_policy::Config;

fn error(json: &str) -> String {
    match Config::parse(json.as_bytes()) {
        Ok(c) => panic!("accepted {json}: {c:?}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn broken_documents_say_where_they_break() {
    assert_eq!(
        error("{\"upstreams\": [{\"name\": \"a\"}],\n \"jitter\" 2}"),
        "not valid JSON: expected `:` at line 2 column 11"
    );
    assert_eq!(
        error(r#"{"upstreams":[{"name":"a"}]} x"#),
        "not valid JSON: trailing characters at line 1 column 30"
    );
    assert_eq!(
        error(r#"{"upstreams":[{"name":"a"}],}"#),
        "not valid JSON: trailing comma at line 1 column 29"
    );
    assert_eq!(
        error(r#"{"upstreams":[{"name":"a"}"#),
        "not valid JSON: EOF while parsing a list at line 1 column 26"
    );
}

#[test]
fn malformed_strings_are_refused() {
    for bad in [
        r#""\u+041""#,
        r#""\u004""#,
        r#""\ud800""#,
        r#""\q""#,
        "\"a\nb\"",
    ] {
        let e = error(&format!(
            r#"{{"upstreams":[{{"name":"a"}}],"route_header":{bad}}}"#
        ));
        assert!(e.starts_with("not valid JSON: "), "{bad}: {e}");
    }
    let mut invalid_utf8 = br#"{"upstreams":[{"name":"a"}],"route_header":"x"#.to_vec();
    invalid_utf8.extend_from_slice(b"\xff\"}");
    let e = Config::parse(&invalid_utf8).expect_err("invalid UTF-8");
    assert!(e.to_string().starts_with("not valid JSON: "), "{e}");
}

#[test]
fn escapes_are_read_before_a_value_is_judged() {
    let c = Config::parse(br#"{"upstreams":[{"name":"\u0061pp\u0031"}]}"#).expect("parses");
    assert_eq!(c.upstreams[0].name, "app1");
    assert_eq!(
        error(r#"{"upstreams":[{"name":"a"}],"route_header":"x\u000d\u000aInjected: 1"}"#),
        "route_header: \"x\\r\\nInjected: 1\" contains '\\r', which is not allowed"
    );
}

#[test]
fn deep_nesting_is_refused_without_exhausting_the_stack() {
    let deep = |open: &str, close: &str| {
        format!(
            r#"{{"upstreams":[{{"name":"a"}}],"max_ejection_percent":{}1{}}}"#,
            open.repeat(100_000),
            close.repeat(100_000)
        )
    };
    assert_eq!(
        error(&deep("[", "]")),
        "max_ejection_percent: expected a whole number, got a list"
    );
    assert_eq!(
        error(&deep(r#"{"a":"#, "}")),
        "max_ejection_percent: expected a whole number, got an object"
    );
    assert_eq!(
        error(&"[".repeat(100_000)),
        "expected an object, got a list"
    );
    let unclosed = format!(
        r#"{{"upstreams":[{{"name":"a"}}],"health_checks":{{"active":{{"headers":{{"x":{}"#,
        "[".repeat(100_000)
    );
    assert!(
        error(&unclosed).starts_with("not valid JSON: EOF while parsing a list"),
        "the skipped value is read to its end, without recursion"
    );
}

#[test]
fn fifty_thousand_distinct_header_names_are_refused_by_the_header_limit() {
    let names: Vec<String> = (0..50_000).map(|i| format!(r#""x-{i}": "v""#)).collect();
    let json = format!(
        r#"{{"upstreams":[{{"name":"a"}}],"health_checks":{{"active":{{"headers":{{{}}}}}}}}}"#,
        names.join(",")
    );
    assert_eq!(
        error(&json),
        "health_checks.active.headers.x-64: at most 64 probe headers are allowed"
    );
}

#[test]
fn ten_thousand_distinct_upstreams_parse_and_a_repeat_among_them_is_found() {
    let mut names: Vec<String> = (0..10_000)
        .map(|i| format!(r#"{{"name":"b{i}"}}"#))
        .collect();
    let json = format!(r#"{{"upstreams":[{}]}}"#, names.join(","));
    assert_eq!(
        Config::parse(json.as_bytes())
            .expect("parses")
            .upstreams
            .len(),
        10_000
    );
    names[9_999] = r#"{"name":"b0"}"#.into();
    let json = format!(r#"{{"upstreams":[{}]}}"#, names.join(","));
    assert_eq!(error(&json), "upstreams[9999].name: \"b0\" is listed twice");
}
