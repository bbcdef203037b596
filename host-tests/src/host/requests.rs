//! A user request's way through the emulated Envoy, from its arrival at a worker to what the
//! user saw.
//!
//! A request goes through the filter as in Envoy: `proxy_on_context_create(ctx, root)`,
//! `proxy_on_request_headers(ctx, n, end_of_stream = true)`; if the filter pauses, the request
//! waits for `proxy_continue_stream` (or a local response). Then the route reads the routing
//! header and sends the request to that cluster; the upstream's script decides the answer, or
//! Envoy makes one (503 UF, 504 UT, 503 NC). The answer passes `proxy_on_response_headers`
//! (and `proxy_on_response_body` when it has one), then `proxy_on_log`, `proxy_on_done`,
//! `proxy_on_delete`. A client that gives up first gets nothing; `on_log` still runs, with DC.

use super::Host;
use crate::abi::{header, ACTION_CONTINUE, ACTION_PAUSE};
use crate::clock::Event;
use crate::envoy::{self, Reply, StreamInfo};
use crate::error::HostError;
use crate::nginx;
use crate::options::Profile;
use crate::state::{Intent, Phase, Stream, ROOT_CONTEXT};
use crate::traffic::Outcome;
use crate::upstream::Sender;
use crate::vm::VmStatus;

impl Host {
    fn stream(&mut self, vm: usize, context: u32) -> Option<&mut Stream> {
        self.vms[vm].state_mut().streams.get_mut(&context)
    }

    fn phase(&mut self, vm: usize, context: u32) -> Option<Phase> {
        self.stream(vm, context).map(|stream| stream.phase)
    }

    /// A request reaches a worker and goes through `on_request_headers`.
    pub(super) fn arrive(&mut self, record: usize) -> Result<(), HostError> {
        let workers = self.vms.len() - 1;
        let vm = (0..workers)
            .map(|i| 1 + (self.next_worker + i) % workers)
            .find(|&vm| self.vms[vm].status != VmStatus::Stopped)
            .ok_or_else(|| HostError::Unsupported("a request with no running worker".into()))?;
        self.next_worker = vm % workers;
        if self.vms[vm].status == VmStatus::Compiling {
            self.vms[vm].queued.push(record);
            return Ok(());
        }
        self.arrive_at(record, vm)
    }

    /// ngx_wasm_module resumes a request paused with calls of its own once the last of them has
    /// been answered, whether or not the filter asked (and only then: a request paused with no
    /// call waits until its client gives up).
    pub(super) fn resume_after_calls(&mut self, vm: usize, context: u32) -> Result<(), HostError> {
        if self.phase(vm, context) != Some(Phase::Paused) {
            return Ok(());
        }
        let pending = self
            .process
            .borrow()
            .calls
            .iter()
            .any(|c| c.vm == vm && c.context == context && c.delivered.is_none());
        if pending {
            return Ok(());
        }
        self.route(vm, context)
    }

    /// Request `record` reaches worker `vm`.
    pub(super) fn arrive_at(&mut self, record: usize, vm: usize) -> Result<(), HostError> {
        let Some(arriving) = self.record_mut(record) else {
            return Ok(());
        };
        arriving.worker = vm;
        let spec = arriving.request.clone();
        let context = self.vms[vm].new_context();
        let root = self
            .listeners
            .iter()
            .find(|l| l.address == spec.destination_address)
            .and_then(|l| l.roots.get(vm).copied())
            .unwrap_or(ROOT_CONTEXT);
        let mut request_headers = vec![
            (":authority".to_string(), spec.authority.clone()),
            (":path".to_string(), spec.path.clone()),
            (":method".to_string(), spec.method.clone()),
            (":scheme".to_string(), "http".to_string()),
        ];
        request_headers.extend(
            spec.headers
                .iter()
                .map(|(name, value)| (name.to_ascii_lowercase(), value.clone())),
        );
        let stream = Stream {
            record,
            root,
            request_headers,
            response_headers: None,
            response_body: None,
            info: StreamInfo {
                source_address: spec.source_address.clone(),
                destination_address: spec.destination_address.clone(),
                ..StreamInfo::default()
            },
            phase: Phase::Decoding,
        };
        let headers = stream.request_headers.len() as i32;
        self.vms[vm].state_mut().streams.insert(context, stream);
        if let Some(after) = spec.give_up_after {
            let event = Event::ClientGivesUp { vm, context };
            self.process.borrow_mut().clock.schedule(after, event);
        }
        self.callback(vm, "proxy_on_context_create", context, &[root as i32])?;
        // ngx_wasm_module passes end_of_stream false in every header callback.
        let end_of_stream = i32::from(self.options.profile == Profile::Envoy);
        let action = self.callback(
            vm,
            "proxy_on_request_headers",
            context,
            &[headers, end_of_stream],
        )?;
        if action.is_some_and(|action| action != ACTION_CONTINUE) {
            if let Some(stream) = self.stream(vm, context) {
                stream.phase = Phase::Paused;
            }
        }
        self.settle(vm)?;
        if self.phase(vm, context) != Some(Phase::Decoding) {
            return Ok(());
        }
        if matches!(self.vms[vm].status, VmStatus::Crashed(_)) {
            return self.respond(vm, context, Reply::wasm_fail_stream());
        }
        self.route(vm, context)
    }

    /// The route picks the cluster named by the routing header (or, in host routing, the backend
    /// at the address it names) and sends the request there; on another listener than the
    /// users' it answers 404 itself.
    fn route(&mut self, vm: usize, context: u32) -> Result<(), HostError> {
        let route_header = self.options.route_header.to_ascii_lowercase();
        let route_timeout = self.options.route_timeout;
        let Some(stream) = self.stream(vm, context) else {
            return Ok(());
        };
        if stream.root != ROOT_CONTEXT {
            return self.respond(vm, context, Reply::direct_response(404));
        }
        stream.phase = Phase::Upstream;
        let headers = &stream.request_headers;
        let cluster = header(headers, &route_header).map(str::to_string);
        let path = header(headers, ":path").unwrap_or_default().to_string();
        let written = cluster.clone();
        let record = stream.record;
        let mut process = self.process.borrow_mut();
        let (now, wall) = (process.clock.now(), process.clock.wall_nanos());
        // The header names a cluster (`cluster_header`), or backends' addresses, one per attempt
        // (`override_host`: this host makes only the first attempt).
        let cluster = cluster.and_then(|value| {
            if process.upstreams.contains_key(&value) {
                return Some(value);
            }
            let first = value.split(',').next().unwrap_or_default().trim();
            let by_address = process.upstreams.iter().find(|(_, u)| u.address == first);
            by_address.map(|(name, _)| name.clone())
        });
        let target = cluster.and_then(|cluster| {
            let upstream = process.upstreams.get_mut(&cluster)?;
            let behaviour = upstream.receive(Sender::User, &path, now);
            Some((cluster, upstream.address.clone(), behaviour))
        });
        let Some((cluster, address, behaviour)) = target else {
            drop(process);
            let reply = match self.options.profile {
                Profile::Envoy => Reply::cluster_not_found(),
                Profile::Nginx => nginx::no_upstream(),
            };
            return self.respond(vm, context, reply);
        };
        let exchange = match self.options.profile {
            Profile::Envoy => envoy::exchange(behaviour, Some(route_timeout), &cluster, wall),
            Profile::Nginx => nginx::proxy(behaviour, route_timeout, &cluster, wall),
        };
        if let Some((after, reply)) = exchange {
            let event = Event::UpstreamReply { vm, context, reply };
            process.clock.schedule(after, event);
        }
        drop(process);
        if let Some(routed) = self.record_mut(record) {
            routed.upstream = Some(cluster.clone());
            routed.routed = Some(now);
            routed.route_header = written;
        }
        if let Some(stream) = self.stream(vm, context) {
            stream.info.upstream = Some((cluster, address));
        }
        Ok(())
    }

    pub(super) fn upstream_replied(
        &mut self,
        vm: usize,
        context: u32,
        reply: Reply,
    ) -> Result<(), HostError> {
        if self.phase(vm, context) != Some(Phase::Upstream) {
            return Ok(()); // answered or abandoned meanwhile
        }
        self.respond(vm, context, reply)
    }

    /// The response passes through the filter, then the request is over.
    fn respond(&mut self, vm: usize, context: u32, reply: Reply) -> Result<(), HostError> {
        let Some(stream) = self.stream(vm, context) else {
            return Ok(());
        };
        stream.phase = Phase::Encoding;
        stream.info.code = Some(reply.status);
        stream.info.flags |= reply.flags;
        stream.info.details = reply.details;
        let headers = reply.headers.len() as i32;
        stream.response_headers = Some(reply.headers);
        let body = reply.body;
        let end_of_stream = i32::from(body.is_empty() && self.options.profile == Profile::Envoy);
        let action = self.callback(
            vm,
            "proxy_on_response_headers",
            context,
            &[headers, end_of_stream],
        )?;
        refuse_pause(action, "proxy_on_response_headers")?;
        self.settle(vm)?;
        if !body.is_empty() {
            let size = body.len() as i32;
            let Some(stream) = self.stream(vm, context) else {
                return Ok(());
            };
            stream.response_body = Some(body);
            let action = self.callback(vm, "proxy_on_response_body", context, &[size, 1])?;
            refuse_pause(action, "proxy_on_response_body")?;
            self.settle(vm)?;
        }
        let Some(stream) = self.stream(vm, context) else {
            return Ok(());
        };
        let sent_status = stream
            .response_headers
            .as_ref()
            .and_then(|headers| header(headers, ":status")?.parse().ok())
            .unwrap_or(reply.status);
        self.finish(vm, context, Outcome::Status(sent_status))
    }

    /// The client disconnects: no response any more, but Envoy still logs the request.
    pub(super) fn give_up(&mut self, vm: usize, context: u32) -> Result<(), HostError> {
        let Some(stream) = self.stream(vm, context) else {
            return Ok(());
        };
        stream.info.flags |= envoy::DC;
        stream.info.details = "downstream_remote_disconnect".to_string();
        self.finish(vm, context, Outcome::Disconnected)
    }

    /// Records what the user saw, then `on_log`, `on_done`, `on_delete`.
    fn finish(&mut self, vm: usize, context: u32, outcome: Outcome) -> Result<(), HostError> {
        let now = self.now();
        let Some(stream) = self.stream(vm, context) else {
            return Ok(());
        };
        let (index, flags, details) = (
            stream.record,
            stream.info.flags,
            stream.info.details.clone(),
        );
        let body = stream.response_body.clone().unwrap_or_default();
        let headers = stream.response_headers.clone().unwrap_or_default();
        if let Some(record) = self.record_mut(index) {
            record.outcome = outcome;
            record.body = body;
            record.headers = headers;
            record.completed = Some(now);
            record.flags = flags;
            record.details = details;
        }
        for callback in ["proxy_on_log", "proxy_on_done", "proxy_on_delete"] {
            self.callback(vm, callback, context, &[])?;
        }
        let state = self.vms[vm].state_mut();
        state.streams.remove(&context);
        state.properties.retain(|(owner, _), _| *owner != context);
        Ok(())
    }

    /// Carries out what the guest asked for during the call that just returned.
    pub(super) fn settle(&mut self, vm: usize) -> Result<(), HostError> {
        loop {
            let intent = self.vms[vm].state_mut().intents.pop_front();
            let Some(intent) = intent else {
                return Ok(());
            };
            match intent {
                Intent::Continue(context) => {
                    if self.phase(vm, context) == Some(Phase::Paused) {
                        self.route(vm, context)?;
                    }
                }
                Intent::LocalReply(context, reply) => {
                    let phase = self.phase(vm, context);
                    if matches!(
                        phase,
                        Some(Phase::Decoding | Phase::Paused | Phase::Upstream)
                    ) {
                        self.respond(vm, context, reply)?;
                    }
                }
                Intent::Reset(context) => {
                    let phase = self.phase(vm, context);
                    if phase.is_some_and(|phase| phase != Phase::Logging) {
                        self.finish(vm, context, Outcome::Reset)?;
                    }
                }
            }
        }
    }
}

fn refuse_pause(action: Option<i32>, callback: &str) -> Result<(), HostError> {
    match action {
        Some(ACTION_PAUSE) => Err(HostError::Unsupported(format!(
            "{callback} returned Pause (responses are never paused here)"
        ))),
        _ => Ok(()),
    }
}
