//! The fleet's calls to etcd on the wire ([`upcheck_policy::fleet`]): on the VM that probes for
//! this Envoy, each tick's requests go out by `dispatch_http_call` to the `fleet.cluster`
//! (etcd's JSON gateway), each answer goes back to the core as read, and the core's notes become
//! log lines. Which backends this balancer then probes, and what the others published, the pool
//! takes in ([`upcheck_policy::Pool::fleet_view`]).

use crate::vm::Vm;
use proxy_wasm::hostcalls;
use proxy_wasm::types::{BufferType, MapType, Status};
use upcheck_policy::fleet::{Fleet, Request, MAX_ANSWER};
use upcheck_policy::{Level, Time};

/// Time passing on the prober: the fleet's calls go out, and the pool takes in where each
/// backend's duty is. Without a `fleet` in the configuration there is none.
pub fn tick(v: &mut Vm, now: Time) {
    let Some(pool) = v.pool.as_mut() else {
        return;
    };
    let Some(settings) = pool.config().fleet.clone() else {
        v.fleet = None;
        return;
    };
    let fleet = match &mut v.fleet {
        Some(fleet) if *fleet.settings() == settings => fleet,
        slot => slot.insert(Fleet::new(settings, now)),
    };
    let requests = fleet.tick(now, &pool.active_table());
    send(fleet, requests, now);
    log(fleet);
    let effects = pool.fleet_view(fleet, now);
    v.carry_out(effects, now);
}

/// The answer to call `token`, if it was the fleet's (else false: a probe's).
pub fn answer(v: &mut Vm, token: u32, body_size: usize, now: Time) -> bool {
    let (Some(fleet), Some(pool)) = (v.fleet.as_mut(), v.pool.as_mut()) else {
        return false;
    };
    if !fleet.owns(token) {
        return false;
    }
    let headers = hostcalls::get_map(MapType::HttpCallResponseHeaders).unwrap_or_default();
    let status = headers
        .iter()
        .find(|(n, _)| n == ":status")
        .and_then(|(_, v)| v.trim().parse::<u16>().ok());
    let body = hostcalls::get_buffer(
        BufferType::HttpCallResponseBody,
        0,
        body_size.min(MAX_ANSWER),
    )
    .ok()
    .flatten()
    .unwrap_or_default();
    fleet.answered(token, status, &body, now);
    log(fleet);
    let effects = pool.fleet_view(fleet, now);
    v.carry_out(effects, now);
    true
}

fn send(fleet: &mut Fleet, requests: Vec<Request>, now: Time) {
    let cluster = fleet.settings().cluster.clone();
    for request in requests {
        let mut headers: Vec<(&str, &str)> = vec![
            (":method", "POST"),
            (":path", request.path),
            (":authority", cluster.as_str()),
            ("content-type", "application/json"),
        ];
        if let Some(token) = &request.token {
            headers.push(("authorization", token.as_str()));
        }
        let call = hostcalls::dispatch_http_call(
            &cluster,
            headers,
            Some(request.body.as_bytes()),
            vec![],
            request.timeout,
        );
        match call {
            Ok(token) => fleet.sent(request.call, token),
            Err(status) => fleet.refused(request.call, describe(status), now),
        }
    }
}

fn log(fleet: &mut Fleet) {
    for note in fleet.take_notes() {
        match note.level {
            Level::Error => log::error!("upcheck: {}", note.text),
            Level::Warn => log::warn!("upcheck: {}", note.text),
            Level::Info => log::info!("upcheck: {}", note.text),
            Level::Debug => log::debug!("upcheck: {}", note.text),
        }
    }
}

fn describe(status: Status) -> &'static str {
    match status {
        Status::BadArgument => "bad argument: is the fleet's cluster defined?",
        Status::NotFound => "not found",
        _ => "refused",
    }
}
