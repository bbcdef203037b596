//! Http calls (`proxy_http_call`): checked as Envoy checks them, then answered by a scripted
//! upstream on the virtual clock, by the proxy itself, or by a real server
//! ([`crate::loopback`]).

use super::{status, trap, Ctx};
use crate::abi::{deserialize_map, header, Headers, Status};
use crate::clock::Event;
use crate::envoy;
use crate::loopback;
use crate::memory::{read, read_string, write_u32, Hostcall};
use crate::nginx;
use crate::options::Profile;
use crate::process::CallRecord;
use crate::state::HostState;
use crate::upstream::Sender;
use std::time::Duration;
use wasmtime::Linker;

/// The hostcall of http calls.
pub(super) fn add(l: &mut Linker<HostState>) -> wasmtime::Result<()> {
    l.func_wrap(
        "env",
        "proxy_http_call",
        |mut c: Ctx,
         up_ptr: i32,
         up_len: i32,
         headers_ptr: i32,
         headers_len: i32,
         body_ptr: i32,
         body_len: i32,
         trailers_ptr: i32,
         trailers_len: i32,
         timeout_ms: i32,
         token_ptr: i32| {
            status((|| {
                let cluster = read_string(&mut c, up_ptr, up_len)?;
                let headers = deserialize_map(&read(&mut c, headers_ptr, headers_len)?)
                    .ok_or(Status::SerializationFailure)?;
                let body = read(&mut c, body_ptr, body_len)?;
                read(&mut c, trailers_ptr, trailers_len)?;
                write_u32(&mut c, token_ptr, 0)?;
                let timeout = Duration::from_millis(u64::from(timeout_ms as u32));
                let token = http_call(c.data(), &cluster, &headers, body, timeout)?;
                write_u32(&mut c, token_ptr, token)
            })())
        },
    )?;
    Ok(())
}

/// Dispatches an http call: checks it as Envoy does, counts it at the upstream, and schedules its
/// answer (the backend's, or Envoy's 503/504) on the agenda; or, to a real server's cluster,
/// sends it there ([`crate::loopback`]).
fn http_call(
    state: &HostState,
    cluster: &str,
    headers: &Headers,
    body: Vec<u8>,
    timeout: Duration,
) -> Hostcall<u32> {
    let nginx = state.profile == Profile::Nginx;
    if nginx && !nginx::DISPATCH_STEPS.contains(&state.callback.as_str()) {
        return trap(format!(
            "can only send HTTP dispatch during {:?}, not {}",
            nginx::DISPATCH_STEPS,
            state.callback
        ));
    }
    let (path, method) = (header(headers, ":path"), header(headers, ":method"));
    if nginx && (path.is_none() || method.is_none()) {
        return trap("dispatch failed: no :method or :path".to_string());
    }
    let (Some(path), Some(_), Some(_)) = (path, method, header(headers, ":authority")) else {
        return Err(Status::BadArgument.into());
    };
    let mut process = state.process.borrow_mut();
    let now = process.clock.now();
    let wall = process.clock.wall_nanos();
    let timeout = (!timeout.is_zero()).then_some(timeout);
    let token = process.next_token();
    if !nginx && process.loopback.address(cluster).is_some() {
        process.loopback.send(loopback::Call {
            token,
            vm: state.vm,
            context: state.effective_context,
            cluster,
            headers,
            body,
            timeout,
            now,
        });
        process.calls.push(CallRecord {
            token,
            vm: state.vm,
            context: state.effective_context,
            from_request: !state.is_root(state.effective_context),
            cluster: cluster.to_string(),
            path: path.to_string(),
            sent: now,
            status: None,
            details: String::new(),
            delivered: None,
        });
        return Ok(token);
    }
    let (cluster, exchange) = if nginx {
        // ngx_wasm_module connects to the `host:port` it is given.
        let found = process
            .upstreams
            .iter_mut()
            .find(|(_, u)| u.address == cluster);
        match found {
            Some((name, upstream)) => {
                let behaviour = upstream.receive(Sender::Probe, path, now);
                let exchange = nginx::dispatch(behaviour, timeout, name, wall);
                (name.clone(), exchange)
            }
            None => (cluster.to_string(), Some(nginx::unresolved())),
        }
    } else {
        let behaviour = process
            .upstreams
            .get_mut(cluster)
            .ok_or(Status::BadArgument)?
            .receive(Sender::Probe, path, now);
        (
            cluster.to_string(),
            envoy::exchange(behaviour, timeout, cluster, wall),
        )
    };
    process.calls.push(CallRecord {
        token,
        vm: state.vm,
        context: state.effective_context,
        from_request: !state.is_root(state.effective_context),
        cluster,
        path: path.to_string(),
        sent: now,
        status: exchange.as_ref().map(|(_, reply)| reply.status),
        details: exchange
            .as_ref()
            .map(|(_, reply)| reply.details.clone())
            .unwrap_or_default(),
        delivered: None,
    });
    if let Some((after, reply)) = exchange {
        let (vm, context) = (state.vm, state.effective_context);
        let event = Event::CallResponse {
            vm,
            context,
            token,
            reply,
        };
        process.clock.schedule(after, event);
    }
    Ok(token)
}
