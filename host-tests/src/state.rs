//! What Envoy keeps per VM, as the data of a VM's wasmtime `Store`: its contexts and their HTTP
//! streams, what a callback is delivering (an http-call answer, a gRPC arrival, a
//! configuration), the tick timer, metric ids, and what the guest asked of its streams. A module
//! of its own so the hostcalls and guest memory access depend on this state, not on the host
//! that drives the VMs.

use crate::abi::{BufferType, Headers, LogLevel};
use crate::envoy::{Reply, StreamInfo};
use crate::grpc::Arrival;
use crate::options::Profile;
use crate::process::Process;
use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::rc::Rc;
use std::time::Duration;
use wasmtime::{Memory, TypedFunc};

/// The id of every VM's root context.
pub(crate) const ROOT_CONTEXT: u32 = 1;

/// Where an HTTP stream is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Phase {
    /// `on_request_headers` is running.
    Decoding,
    /// The filter returned Pause and has not continued yet.
    Paused,
    /// Routed; waiting for the upstream (or Envoy) to answer.
    Upstream,
    /// The response is passing through the filter.
    Encoding,
    /// Over: `on_log`, `on_done`, `on_delete` are running.
    Logging,
}

/// One HTTP context (a user request) in a VM.
#[derive(Debug)]
pub(crate) struct Stream {
    /// Index of the request's record in the host.
    pub record: usize,
    /// The root context of the listener it arrived on ([`ROOT_CONTEXT`] for the users' one).
    pub root: u32,
    pub request_headers: Headers,
    pub response_headers: Option<Headers>,
    /// The response body, readable while `on_response_body` runs.
    pub response_body: Option<Vec<u8>>,
    pub info: StreamInfo,
    pub phase: Phase,
}

/// Something the guest asked of an HTTP stream; carried out once the current guest call returns,
/// as Envoy defers such actions until the VM call is over.
#[derive(Debug)]
pub(crate) enum Intent {
    Continue(u32),
    LocalReply(u32, Reply),
    Reset(u32),
}

/// The guest exports hostcalls use, looked up once per instance (a lookup by name costs more
/// than most hostcalls).
#[derive(Clone, Default)]
pub(crate) struct Exports {
    /// Its linear memory.
    pub memory: Option<Memory>,
    /// `malloc` or `proxy_on_memory_allocate`, or why it is not `(i32) -> i32`.
    pub malloc: Option<Result<TypedFunc<i32, i32>, String>>,
}

/// What Envoy keeps per VM.
pub(crate) struct HostState {
    pub exports: Exports,
    pub vm: usize,
    /// Which proxy this host behaves as.
    pub profile: Profile,
    /// The export running (the host's callback into the guest).
    pub callback: String,
    pub process: Rc<RefCell<Process>>,
    pub log_level: LogLevel,
    pub effective_context: u32,
    /// The root contexts of the other listeners' plugins ([`crate::Host::listen`]).
    pub listener_roots: Vec<u32>,
    pub streams: BTreeMap<u32, Stream>,
    /// The http-call response being delivered by `proxy_on_http_call_response`.
    pub call_response: Option<Reply>,
    /// What a gRPC stream delivers by the callback running (metadata, a message, its close).
    pub grpc_arrival: Option<Arrival>,
    /// The VM or plugin configuration, while `on_vm_start` / `on_configure` runs.
    pub configuration: Option<(BufferType, Vec<u8>)>,
    /// Properties the guest set, by (context, serialized path).
    pub properties: HashMap<(u32, Vec<u8>), Vec<u8>>,
    /// Metric ids are indexes into this list of names.
    pub metric_names: Vec<String>,
    pub tick_period: Duration,
    pub tick_scheduled: bool,
    pub intents: VecDeque<Intent>,
    /// State of the deterministic generator behind WASI `random_get`.
    pub random: u64,
}

impl HostState {
    pub(crate) fn new(
        vm: usize,
        process: Rc<RefCell<Process>>,
        log_level: LogLevel,
        profile: Profile,
    ) -> Self {
        HostState {
            exports: Exports::default(),
            vm,
            profile,
            callback: String::new(),
            process,
            log_level,
            effective_context: ROOT_CONTEXT,
            listener_roots: Vec::new(),
            streams: BTreeMap::new(),
            call_response: None,
            grpc_arrival: None,
            configuration: None,
            properties: HashMap::new(),
            metric_names: Vec::new(),
            tick_period: Duration::ZERO,
            tick_scheduled: false,
            intents: VecDeque::new(),
            random: 0x9E37_79B9_7F4A_7C15 ^ vm as u64,
        }
    }

    /// Whether `context` is one of this VM's root contexts.
    pub(crate) fn is_root(&self, context: u32) -> bool {
        context == ROOT_CONTEXT || self.listener_roots.contains(&context)
    }

    /// The HTTP stream of the effective context, if it is one.
    pub(crate) fn stream(&self) -> Option<&Stream> {
        self.streams.get(&self.effective_context)
    }

    /// Mutable access to the effective HTTP stream.
    pub(crate) fn stream_mut(&mut self) -> Option<&mut Stream> {
        self.streams.get_mut(&self.effective_context)
    }
}
