//! A gRPC call's end, as the passive checks read it. A gRPC server answers every call with HTTP
//! 200 and says how it went in `grpc-status`: in the trailers after its messages, or in the
//! headers of a trailers-only answer (an error carrying no message). A backend whose every call
//! ends `UNAVAILABLE` answers 200 to every request: read as HTTP, it looks perfectly healthy.
//!
//! Each code is judged as the HTTP status `google.rpc.Code` gives it (`code.proto`), so that
//! `unhealthy_status`, the outlier rules and the retry rules read a call exactly as they read a
//! request, and one configuration serves both:
//!
//! | gRPC status | judged as | so, by default |
//! | --- | --- | --- |
//! | `OK` | 200 | a success |
//! | `UNAVAILABLE` | 503 | a gateway error: toward `max_fails`, and a 5xx for the peer comparison |
//! | `DEADLINE_EXCEEDED` | 504 | a timeout: toward `max_fails` |
//! | `RESOURCE_EXHAUSTED` | 429 | overload: counts only where `unhealthy_status` lists 429 |
//! | `INTERNAL`, `UNKNOWN`, `DATA_LOSS` | 500 | the peer comparison, as a 500 (never `max_fails` by default) |
//! | `UNIMPLEMENTED` | 501 | the peer comparison |
//! | `CANCELLED` | 499 | the client gave up: never counts |
//! | `INVALID_ARGUMENT`, `FAILED_PRECONDITION`, `OUT_OF_RANGE` | 400 | the application's answer: never counts |
//! | `NOT_FOUND` · `ALREADY_EXISTS`, `ABORTED` · `PERMISSION_DENIED` · `UNAUTHENTICATED` | 404 · 409 · 403 · 401 | never counts |
//!
//! A `grpc-status` that is not a number is `UNKNOWN`, as gRPC's clients take it; one above 16
//! is too ([`Code::of`]).

use super::status::Code;

/// The header (or trailer) in which a gRPC server says how a call ended.
pub const STATUS_HEADER: &str = "grpc-status";

impl Code {
    /// The HTTP status `google.rpc.Code` gives this code: how the passive checks judge a call
    /// that ended with it.
    pub fn http_status(self) -> u16 {
        match self {
            Code::Ok => 200,
            Code::Cancelled => 499,
            Code::Unknown | Code::Internal | Code::DataLoss => 500,
            Code::InvalidArgument | Code::FailedPrecondition | Code::OutOfRange => 400,
            Code::DeadlineExceeded => 504,
            Code::NotFound => 404,
            Code::AlreadyExists | Code::Aborted => 409,
            Code::PermissionDenied => 403,
            Code::Unauthenticated => 401,
            Code::ResourceExhausted => 429,
            Code::Unimplemented => 501,
            Code::Unavailable => 503,
        }
    }

    /// The code a `grpc-status` value names: its decimal number, or `UNKNOWN` if it is none.
    pub fn in_header(value: &[u8]) -> Code {
        std::str::from_utf8(value)
            .ok()
            .and_then(|text| text.trim().parse().ok())
            .map_or(Code::Unknown, Code::of)
    }
}

/// What a call's response headers say of how it ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallEnd {
    /// It ended with this code, in the headers (a trailers-only answer).
    Ended(Code),
    /// Its messages follow: the trailers will say how it ended.
    InTrailers,
    /// Not a gRPC answer (no `grpc-status`, and not 200: a sidecar's 502, say): judged by its
    /// HTTP status, as any request.
    Http(u16),
}

/// What response headers with HTTP `status` and `grpc-status` value `grpc_status` (if any) say
/// of a call: a `grpc-status` in the headers ends it whatever the HTTP status; a 200 without
/// one has its messages and trailers to come.
pub fn heard(status: u16, grpc_status: Option<&[u8]>) -> CallEnd {
    match grpc_status {
        Some(value) => CallEnd::Ended(Code::in_header(value)),
        None if status == 200 => CallEnd::InTrailers,
        None => CallEnd::Http(status),
    }
}

/// How a call whose trailers came ended, by their `grpc-status` (if any): trailers without one
/// break the protocol, and end it `UNKNOWN`.
pub fn in_trailers(grpc_status: Option<&[u8]>) -> Code {
    grpc_status.map_or(Code::Unknown, Code::in_header)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_status_in_the_headers_ends_the_call_whatever_the_http_status() {
        assert_eq!(heard(200, Some(b"14")), CallEnd::Ended(Code::Unavailable));
        assert_eq!(heard(503, Some(b"0")), CallEnd::Ended(Code::Ok));
        assert_eq!(heard(200, None), CallEnd::InTrailers);
        assert_eq!(heard(502, None), CallEnd::Http(502));
    }

    #[test]
    fn a_grpc_status_that_is_no_number_or_out_of_range_is_unknown() {
        for value in [&b"fourteen"[..], b"", b"-1", b"99999999", b"17"] {
            assert_eq!(Code::in_header(value), Code::Unknown, "{value:?}");
        }
        assert_eq!(in_trailers(None), Code::Unknown);
        assert_eq!(in_trailers(Some(b"4")), Code::DeadlineExceeded);
    }

    #[test]
    fn the_codes_that_mean_the_backend_failed_are_5xx_and_the_applications_own_are_not() {
        let failing = [Code::Unavailable, Code::DeadlineExceeded, Code::Internal];
        assert!(failing.iter().all(|c| c.http_status() >= 500));
        let own = [
            Code::InvalidArgument,
            Code::NotFound,
            Code::PermissionDenied,
        ];
        assert!(own.iter().all(|c| c.http_status() < 500));
        assert_eq!(Code::ResourceExhausted.http_status(), 429);
        assert_eq!(Code::Cancelled.http_status(), 499);
    }
}
