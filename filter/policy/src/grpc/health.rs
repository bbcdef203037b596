//! The gRPC Health Checking Protocol (`grpc.health.v1.Health`): the service a gRPC server reports
//! its health through, by `Check` (one answer) and `Watch` (a stream of answers, one at each
//! change). A request names the service asked about (`""`: the server as a whole); an answer
//! carries its serving status.
//!
//! The messages are protocol buffers, encoded and decoded by prost's derived code from the one
//! field each has, as etcd's watch messages are ([`crate::etcd::watch`]).

use prost::Message;
use serde::{Deserialize, Serialize};

/// The health service's full name.
pub const SERVICE: &str = "grpc.health.v1.Health";

/// The method that answers once.
pub const CHECK: &str = "Check";

/// The method that answers at once, then at every change, on one stream.
pub const WATCH: &str = "Watch";

/// The largest answer read: an answer is a few bytes (one enum field).
pub const MAX_ANSWER: usize = 64;

/// `HealthCheckRequest`: the service asked about.
#[derive(Clone, PartialEq, Message)]
struct HealthCheckRequest {
    #[prost(string, tag = "1")]
    service: String,
}

/// `HealthCheckResponse`: its serving status.
#[derive(Clone, PartialEq, Message)]
struct HealthCheckResponse {
    #[prost(int32, tag = "1")]
    status: i32,
}

/// What a server says of a service's health.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Serving {
    /// `UNKNOWN` (0), or a value the protocol does not define: the server does not say.
    Unknown,
    /// `SERVING` (1): it takes calls.
    Serving,
    /// `NOT_SERVING` (2): it is up and takes no calls, the usual way a gRPC server drains.
    NotServing,
    /// `SERVICE_UNKNOWN` (3, `Watch` only): the server knows no service by that name.
    ServiceUnknown,
}

impl Serving {
    /// Its name as the protocol writes it: what the log and the status page say.
    pub fn name(self) -> &'static str {
        match self {
            Serving::Unknown => "UNKNOWN",
            Serving::Serving => "SERVING",
            Serving::NotServing => "NOT_SERVING",
            Serving::ServiceUnknown => "SERVICE_UNKNOWN",
        }
    }
}

/// The request of `Check` or `Watch` about `service`, encoded.
pub fn request(service: &str) -> Vec<u8> {
    HealthCheckRequest {
        service: service.to_owned(),
    }
    .encode_to_vec()
}

/// What an answer of `Check` or `Watch` says; an error naming what is wrong for bytes that are
/// not such an answer (larger than [`MAX_ANSWER`], or no protocol buffer).
pub fn serving(answer: &[u8]) -> Result<Serving, String> {
    if answer.len() > MAX_ANSWER {
        return Err(format!(
            "a health answer of {} bytes, more than the {MAX_ANSWER} one field takes",
            answer.len()
        ));
    }
    let decoded = HealthCheckResponse::decode(answer)
        .map_err(|e| format!("a health answer that does not decode: {e}"))?;
    Ok(match decoded.status {
        1 => Serving::Serving,
        2 => Serving::NotServing,
        3 => Serving::ServiceUnknown,
        _ => Serving::Unknown,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_names_its_service_and_the_whole_server_is_the_empty_name() {
        assert_eq!(request("shop.Cart"), b"\x0a\x09shop.Cart");
        assert_eq!(request(""), b"");
    }

    #[test]
    fn each_serving_status_reads_from_its_answer_and_an_undefined_one_is_unknown() {
        assert_eq!(
            serving(b""),
            Ok(Serving::Unknown),
            "0 is left out on the wire"
        );
        assert_eq!(serving(b"\x08\x01"), Ok(Serving::Serving));
        assert_eq!(serving(b"\x08\x02"), Ok(Serving::NotServing));
        assert_eq!(serving(b"\x08\x03"), Ok(Serving::ServiceUnknown));
        assert_eq!(serving(b"\x08\x07"), Ok(Serving::Unknown));
    }

    #[test]
    fn an_answer_that_is_no_health_answer_is_refused_saying_why() {
        let truncated = serving(b"\x08").unwrap_err();
        assert!(truncated.contains("does not decode"), "{truncated}");
        let long = serving(&[0u8; MAX_ANSWER + 1]).unwrap_err();
        assert!(long.contains("more than"), "{long}");
    }
}
