//! User requests: what the test sends, what happens to each request inside the emulated Envoy,
//! and what the users saw.
//!
//! A request goes through the filter as in Envoy: `proxy_on_context_create(ctx, root)`,
//! `proxy_on_request_headers(ctx, n, end_of_stream = true)`; if the filter pauses, the request
//! waits for `proxy_continue_stream` (or a local response). Then the route reads the routing
//! header and sends the request to that cluster; the upstream's script decides the answer, or
//! Envoy makes one (503 UF, 504 UT, 503 NC). The answer passes `proxy_on_response_headers`
//! (and `proxy_on_response_body` when it has one), then `proxy_on_log`, `proxy_on_done`,
//! `proxy_on_delete`. A client that gives up first gets nothing; `on_log` still runs, with DC.

use crate::abi::{Headers, ACTION_CONTINUE, ACTION_PAUSE};
use crate::clock::Event;
use crate::envoy::{self, Reply, StreamInfo};
use crate::host::{Host, HostError, Profile};
use crate::nginx;
use crate::upstream::Sender;
use crate::vm::{Intent, Phase, Stream, VmStatus, ROOT_CONTEXT};
use std::collections::BTreeMap;
use std::fmt;
use std::ops::Range;
use std::time::Duration;

/// How long past its last request a batch may take to finish before open requests are left
/// `Pending`, on top of the route timeout.
const DRAIN_MARGIN: Duration = Duration::from_secs(60);

/// One user request to send.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RequestSpec {
    /// `:method`. Default `GET`.
    pub method: String,
    /// `:path`. Default `/`.
    pub path: String,
    /// `:authority`. Default `app.example.com`.
    pub authority: String,
    /// More request headers (a client-supplied routing header, for instance).
    pub headers: Headers,
    /// The client's address (`source.address`). Default a remote `203.0.113.7:50000`.
    pub source_address: String,
    /// The address the client connected to (`destination.address`). Default the proxy's
    /// public `198.51.100.1:8080`, the users' listener; another listener's address
    /// ([`crate::Host::listen`]) sends the request to that listener.
    pub destination_address: String,
    /// The client disconnects this long after sending, if it has no answer yet.
    pub give_up_after: Option<Duration>,
}

impl Default for RequestSpec {
    fn default() -> Self {
        RequestSpec {
            method: "GET".to_string(),
            path: "/".to_string(),
            authority: "app.example.com".to_string(),
            headers: Headers::new(),
            source_address: "203.0.113.7:50000".to_string(),
            destination_address: "198.51.100.1:8080".to_string(),
            give_up_after: None,
        }
    }
}

/// Requests at a fixed rate, round robin over the running workers.
#[derive(Clone, Debug)]
pub struct Load {
    /// Requests per second.
    pub rate: u32,
    /// How long to keep sending.
    pub duration: Duration,
    /// What every request looks like.
    pub request: RequestSpec,
}

/// What the user saw.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Not finished (still paused, or waiting beyond the drain limit).
    Pending,
    /// A response with this status (from a backend, from Envoy, or from the filter).
    Status(u16),
    /// The client gave up before any response.
    Disconnected,
    /// The filter reset the stream.
    Reset,
}

/// One request and what became of it. Times are virtual, since the host started.
#[derive(Clone, Debug)]
pub struct RequestRecord {
    /// What was sent.
    pub request: RequestSpec,
    /// When it was sent.
    pub sent: Duration,
    /// The worker VM that handled it (0 until it arrived).
    pub worker: usize,
    /// The cluster it was routed to, if any.
    pub upstream: Option<String>,
    /// When the route sent it there.
    pub routed: Option<Duration>,
    /// The route header as the filter left it, when the route sent it on.
    pub route_header: Option<String>,
    /// What the user saw.
    pub outcome: Outcome,
    /// When the user saw it.
    pub completed: Option<Duration>,
    /// Envoy response flags (`UF`, `UT`, `DC`, `NC` in [`crate::envoy`]).
    pub flags: u64,
    /// Envoy response code details.
    pub details: String,
    /// Fuel the filter spent on this request, over all its callbacks.
    pub fuel: u64,
    /// The response body the user got.
    pub body: Vec<u8>,
    /// The response headers the user got, after the filter.
    pub headers: Headers,
}

impl RequestRecord {
    /// The user-visible status, if a response came.
    pub fn status(&self) -> Option<u16> {
        match self.outcome {
            Outcome::Status(status) => Some(status),
            _ => None,
        }
    }

    /// A failure for the user: a 5xx, or no response at all.
    pub fn failed(&self) -> bool {
        !matches!(self.status(), Some(status) if status < 500)
    }
}

/// The requests of one batch, with summaries.
#[derive(Clone, Debug)]
pub struct Traffic {
    /// Every request, in sending order.
    pub requests: Vec<RequestRecord>,
}

impl Traffic {
    /// Number of requests.
    pub fn len(&self) -> usize {
        self.requests.len()
    }

    /// Whether no request was sent.
    pub fn is_empty(&self) -> bool {
        self.requests.is_empty()
    }

    /// The requests that failed for the user.
    pub fn failures(&self) -> Vec<&RequestRecord> {
        self.requests.iter().filter(|r| r.failed()).collect()
    }

    /// Failed requests per cluster they were routed to (`-` when not routed).
    pub fn failures_by_upstream(&self) -> BTreeMap<String, usize> {
        count_by(self.failures().into_iter(), upstream_of)
    }

    /// Requests per cluster they were routed to (`-` when not routed).
    pub fn by_upstream(&self) -> BTreeMap<String, usize> {
        count_by(self.requests.iter(), upstream_of)
    }

    /// Requests per outcome: `200`, `503`, `disconnected`, `reset`, `pending`.
    pub fn outcomes(&self) -> BTreeMap<String, usize> {
        count_by(self.requests.iter(), |r| match r.outcome {
            Outcome::Status(status) => status.to_string(),
            Outcome::Disconnected => "disconnected".to_string(),
            Outcome::Reset => "reset".to_string(),
            Outcome::Pending => "pending".to_string(),
        })
    }

    /// When the last failing request was sent.
    pub fn last_failure_sent(&self) -> Option<Duration> {
        self.failures().iter().map(|r| r.sent).max()
    }

    /// Mean fuel the filter spent per request.
    pub fn mean_fuel(&self) -> u64 {
        let total: u64 = self.requests.iter().map(|r| r.fuel).sum();
        total / (self.requests.len().max(1) as u64)
    }
}

impl fmt::Display for Traffic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} requests, outcomes {:?}, by upstream {:?}, failures by upstream {:?}",
            self.len(),
            self.outcomes(),
            self.by_upstream(),
            self.failures_by_upstream()
        )?;
        if let Some(last) = self.last_failure_sent() {
            write!(f, ", last failure sent at {last:?}")?;
        }
        Ok(())
    }
}

fn upstream_of(record: &RequestRecord) -> String {
    record.upstream.clone().unwrap_or_else(|| "-".to_string())
}

fn count_by<'a>(
    records: impl Iterator<Item = &'a RequestRecord>,
    key: impl Fn(&RequestRecord) -> String,
) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for record in records {
        *counts.entry(key(record)).or_default() += 1;
    }
    counts
}

impl Host {
    /// Sends `GET /` at `rate` per second for `duration`, then lets the requests finish; the clock
    /// ends at the last completion (at least `duration` later).
    pub fn traffic(&mut self, rate: u32, duration: Duration) -> Result<Traffic, HostError> {
        self.load(Load {
            rate,
            duration,
            request: RequestSpec::default(),
        })
    }

    /// Sends `load`, then lets its requests finish (see [`Host::traffic`]).
    pub fn load(&mut self, load: Load) -> Result<Traffic, HostError> {
        let batch = self.send_load(&load)?;
        self.advance(load.duration)?;
        self.drain(batch.clone())?;
        Ok(Traffic {
            requests: self.kept(batch).to_vec(),
        })
    }

    /// Schedules the requests of `load` from now on without moving the clock, for a test that
    /// moves it itself ([`Host::advance`]) and collects the requests with
    /// [`Host::take_finished_records`]. Returns the indexes of the requests, counted from the
    /// first request the host sent.
    pub fn send_load(&mut self, load: &Load) -> Result<Range<usize>, HostError> {
        if load.rate == 0 {
            return Err(HostError::Unsupported("a load of 0 requests/s".to_string()));
        }
        let interval = Duration::from_secs(1) / load.rate;
        let first = self.records_taken + self.records.len();
        let mut offset = Duration::ZERO;
        while offset < load.duration {
            self.schedule_request(offset, load.request.clone());
            offset += interval;
        }
        Ok(first..self.records_taken + self.records.len())
    }

    /// Sends one request now and lets it finish.
    pub fn request(&mut self, request: RequestSpec) -> Result<RequestRecord, HostError> {
        let record = self.records_taken + self.records.len();
        self.schedule_request(Duration::ZERO, request);
        self.drain(record..record + 1)?;
        self.kept(record..record + 1)
            .first()
            .cloned()
            .ok_or_else(|| HostError::Unsupported("a request taken before it finished".into()))
    }

    /// Sends one request `after` from now without waiting for it: it arrives as the clock
    /// passes that instant. Returns its index, counted from the first request the host sent
    /// (its index in [`Host::records`] unless [`Host::take_finished_records`] took some).
    pub fn send(&mut self, after: Duration, request: RequestSpec) -> usize {
        self.schedule_request(after, request);
        self.records_taken + self.records.len() - 1
    }

    /// Every request sent so far, less those taken by [`Host::take_finished_records`].
    pub fn records(&self) -> &[RequestRecord] {
        &self.records
    }

    /// Removes and returns the finished requests at the front of [`Host::records`], in sending
    /// order up to the first one not finished, so that a long run keeps only the requests in
    /// flight in memory.
    pub fn take_finished_records(&mut self) -> Traffic {
        let finished = self
            .records
            .iter()
            .take_while(|r| r.outcome != Outcome::Pending)
            .count();
        self.records_taken += finished;
        Traffic {
            requests: self.records.drain(..finished).collect(),
        }
    }

    /// The kept records of the requests with indexes `batch` (those not taken yet).
    fn kept(&self, batch: Range<usize>) -> &[RequestRecord] {
        let start = batch.start.saturating_sub(self.records_taken);
        let end = batch.end.saturating_sub(self.records_taken);
        self.records.get(start..end).unwrap_or_default()
    }

    /// The record of the request with index `index`, unless it was taken.
    pub(crate) fn record_mut(&mut self, index: usize) -> Option<&mut RequestRecord> {
        let kept = index.checked_sub(self.records_taken)?;
        self.records.get_mut(kept)
    }

    fn schedule_request(&mut self, after: Duration, request: RequestSpec) {
        let record = self.records_taken + self.records.len();
        self.records.push(RequestRecord {
            request,
            sent: self.now() + after,
            worker: 0,
            upstream: None,
            routed: None,
            route_header: None,
            outcome: Outcome::Pending,
            completed: None,
            flags: 0,
            details: String::new(),
            fuel: 0,
            body: Vec::new(),
            headers: Headers::new(),
        });
        let event = Event::RequestArrives { record };
        self.process.borrow_mut().clock.schedule(after, event);
    }

    /// Runs the clock until every request in `batch` has finished, or the drain limit.
    fn drain(&mut self, batch: Range<usize>) -> Result<(), HostError> {
        let last_sent = self.kept(batch.clone()).iter().map(|r| r.sent).max();
        let limit = last_sent.unwrap_or_default() + self.options.route_timeout + DRAIN_MARGIN;
        while self
            .kept(batch.clone())
            .iter()
            .any(|r| r.outcome == Outcome::Pending)
        {
            let next = self.process.borrow().clock.next_due();
            match next {
                Some(at) if at <= limit => self.advance_to(at)?,
                _ => break,
            }
        }
        Ok(())
    }

    fn stream(&mut self, vm: usize, context: u32) -> Option<&mut Stream> {
        self.vms[vm].state_mut().streams.get_mut(&context)
    }

    fn phase(&mut self, vm: usize, context: u32) -> Option<Phase> {
        self.stream(vm, context).map(|stream| stream.phase)
    }

    /// A request reaches a worker and goes through `on_request_headers`.
    pub(crate) fn arrive(&mut self, record: usize) -> Result<(), HostError> {
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
    pub(crate) fn resume_after_calls(&mut self, vm: usize, context: u32) -> Result<(), HostError> {
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
    pub(crate) fn arrive_at(&mut self, record: usize, vm: usize) -> Result<(), HostError> {
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
        let header = |name: &str| {
            let found = stream.request_headers.iter().find(|(n, _)| n == name);
            found.map(|(_, value)| value.clone())
        };
        let (cluster, path) = (header(&route_header), header(":path").unwrap_or_default());
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

    pub(crate) fn upstream_replied(
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
            .iter()
            .flatten()
            .find(|(name, _)| name == ":status")
            .and_then(|(_, value)| value.parse().ok())
            .unwrap_or(reply.status);
        self.finish(vm, context, Outcome::Status(sent_status))
    }

    /// The client disconnects: no response any more, but Envoy still logs the request.
    pub(crate) fn give_up(&mut self, vm: usize, context: u32) -> Result<(), HostError> {
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
    pub(crate) fn settle(&mut self, vm: usize) -> Result<(), HostError> {
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
