//! Unary gRPC calls (`proxy_grpc_call`) to a scripted upstream: what the guest is told, and when,
//! as Envoy's gRPC client (`Grpc::AsyncRequestImpl` over its HTTP async client) ends a call.
//!
//! The upstream answers the call's path (`/{service}/{method}`) as it answers any request
//! ([`crate::upstream::Behaviour`]), and the answer becomes one arrival:
//! - the backend's 200 carrying `grpc-status` (a trailers-only answer): the call closes with
//!   that status and its `grpc-message`; an OK without a message, 13 INTERNAL, as Envoy's client
//!   fails a unary call that ends without its one message;
//! - the backend's 200 without it: its body is the call's one message, and the call is over
//!   (Envoy closes only a call that failed);
//! - the backend's answer with another HTTP status: closed with 1 CANCELLED, as Envoy's client
//!   reports any status but 200 that carries no `grpc-status`;
//! - what Envoy makes up itself (a refused connection, a full circuit breaker, no answer within
//!   the call's timeout): its gRPC local reply, 14 UNAVAILABLE with the text of the answer it
//!   would have made to a plain request as the message, as for streams ([`super`]).

use crate::envoy::{self, Reply};
use crate::upstream::Behaviour;
use std::time::Duration;

use super::Arrival;

/// 14 UNAVAILABLE: what Envoy's local replies become for a gRPC request.
const UNAVAILABLE: u32 = 14;
/// 1 CANCELLED: what Envoy's gRPC client reports for an HTTP status other than 200.
const CANCELLED: u32 = 1;

/// When, after it was sent at `wall_nanos`, a call to an upstream behaving as `behaviour` ends,
/// and how; `None` when it never does (no answer and no `timeout`).
pub(crate) fn answer(
    behaviour: Behaviour,
    timeout: Option<Duration>,
    server: &str,
    wall_nanos: u64,
) -> Option<(Duration, Arrival)> {
    let (after, reply) = envoy::exchange(behaviour, timeout, server, wall_nanos)?;
    Some((after, arrival(&reply)))
}

/// What the guest is told of a call answered `reply`.
fn arrival(reply: &Reply) -> Arrival {
    let header = |name: &str| {
        reply
            .headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    };
    if reply.details != "via_upstream" {
        return Arrival::Close {
            status: UNAVAILABLE,
            message: String::from_utf8_lossy(&reply.body).into_owned(),
        };
    }
    if reply.status != 200 {
        return Arrival::Close {
            status: CANCELLED,
            message: String::new(),
        };
    }
    match header("grpc-status").map(str::parse::<u32>) {
        Some(Ok(0)) => Arrival::Close {
            status: 13,
            message: String::new(),
        },
        Some(Ok(status)) => Arrival::Close {
            status,
            message: header("grpc-message").unwrap_or_default().to_string(),
        },
        // A status that is no number: the client's own INTERNAL.
        Some(Err(_)) => Arrival::Close {
            status: 13,
            message: String::new(),
        },
        None => Arrival::Message(reply.body.clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ended(behaviour: Behaviour) -> Option<(Duration, Arrival)> {
        answer(behaviour, Some(Duration::from_secs(5)), "app", 0)
    }

    #[test]
    fn a_backends_answer_is_the_calls_message_and_its_trailers_only_status_closes_the_call() {
        let serving = Behaviour::status(200).body("\u{8}\u{1}");
        assert_eq!(
            ended(serving),
            Some((Duration::from_millis(1), Arrival::Message(vec![8, 1])))
        );
        let unavailable = Behaviour::status(200)
            .header("grpc-status", "14")
            .header("grpc-message", "draining");
        assert_eq!(
            ended(unavailable),
            Some((
                Duration::from_millis(1),
                Arrival::Close {
                    status: 14,
                    message: "draining".into()
                }
            ))
        );
        let not_grpc = Behaviour::status(502);
        assert!(matches!(
            ended(not_grpc),
            Some((_, Arrival::Close { status: 1, .. }))
        ));
    }

    #[test]
    fn what_envoy_makes_up_closes_the_call_unavailable_with_envoys_text() {
        let Some((after, Arrival::Close { status, message })) = ended(Behaviour::Refuse) else {
            panic!("a refused connection closes the call");
        };
        assert_eq!((after, status), (Duration::ZERO, 14));
        assert!(message.starts_with("upstream connect error"), "{message}");
        let Some((after, Arrival::Close { status, message })) = ended(Behaviour::Hang) else {
            panic!("a hung backend's call ends at its timeout");
        };
        assert_eq!((after, status), (Duration::from_secs(5), 14));
        assert_eq!(message, "upstream request timeout");
        assert_eq!(answer(Behaviour::Hang, None, "app", 0), None);
    }
}
