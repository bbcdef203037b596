//! A backend's answer to a gRPC health check, in a scenario: what its `grpc.health.v1.Health`
//! service says when the configuration checks it by the gRPC Health Checking Protocol
//! (`health_checks.active.grpc`).
//!
//! `up` then reads a serving status, `"SERVING"`, `"NOT_SERVING"` or `"SERVICE_UNKNOWN"` (the
//! `Check`'s answer, with status OK), or a gRPC status by its name, `"UNAVAILABLE"`,
//! `"UNIMPLEMENTED"`, … (the call ends with it, trailers-only); `"hang"`, `"refuse"` and
//! `"overflow"` as for HTTP, and `"200"` (the default) is `"SERVING"`. Each is an HTTP/2 answer of
//! the scripted upstream, as the gRPC server sends it: 200 with `content-type: application/grpc`
//! and either the answer's message as its body or `grpc-status` in its headers.

use upcheck_host_tests::Behaviour;
use upcheck_policy::grpc::health::{self, Serving};
use upcheck_policy::grpc::status::Code;

/// The serving statuses a scenario names, with their number in `HealthCheckResponse`.
const SERVING: [(Serving, u8); 3] = [
    (Serving::Serving, 1),
    (Serving::NotServing, 2),
    (Serving::ServiceUnknown, 3),
];

/// The answer `text` names, if it is a gRPC one.
pub(super) fn parse(text: &str) -> Option<Behaviour> {
    if let Some((_, number)) = SERVING.iter().find(|(s, _)| s.name() == text) {
        return Some(serving(*number));
    }
    (1..=16)
        .find(|n| Code::of(*n).name() == text)
        .map(|n| grpc_answer().header("grpc-status", &n.to_string()))
}

/// `SERVING`: what `"200"` is to a gRPC check.
pub fn serving_answer() -> Behaviour {
    serving(1)
}

fn serving(number: u8) -> Behaviour {
    let message = String::from_utf8(vec![8, number]).unwrap_or_default();
    grpc_answer().body(&message)
}

fn grpc_answer() -> Behaviour {
    Behaviour::status(200).header("content-type", "application/grpc")
}

/// Whether `behaviour` is a gRPC server's answer.
pub fn is_grpc(behaviour: &Behaviour) -> bool {
    matches!(behaviour, Behaviour::Answer { headers, .. }
        if headers.iter().any(|(n, v)| n == "content-type" && v == "application/grpc"))
}

/// How a gRPC answer reads in a timeline: `SERVING`, `UNAVAILABLE`.
pub(super) fn describe(behaviour: &Behaviour) -> Option<String> {
    let Behaviour::Answer { headers, body, .. } = behaviour else {
        return None;
    };
    if !is_grpc(behaviour) {
        return None;
    }
    let status = headers.iter().find(|(n, _)| n == "grpc-status");
    Some(match status {
        Some((_, code)) => Code::of(code.parse().unwrap_or(2)).name().to_string(),
        None => health::serving(body.as_bytes())
            .unwrap_or(Serving::Unknown)
            .name()
            .to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serving_statuses_and_grpc_statuses_read_and_describe_themselves_as_written() {
        for text in [
            "SERVING",
            "NOT_SERVING",
            "SERVICE_UNKNOWN",
            "UNAVAILABLE",
            "UNIMPLEMENTED",
        ] {
            let answer = parse(text).unwrap_or_else(|| panic!("{text} reads"));
            assert!(is_grpc(&answer));
            assert_eq!(describe(&answer).as_deref(), Some(text));
        }
        assert_eq!(
            parse("OK"),
            None,
            "a check that is OK says a serving status"
        );
        assert_eq!(parse("200"), None);
        assert_eq!(describe(&Behaviour::status(200)), None);
    }
}
