//! One instance of the module: a wasmtime `Store` whose data is what Envoy keeps per VM (its
//! contexts, the http-call response being delivered, tick timer, metric ids), plus fuel metering.
//!
//! Every call into the guest goes through [`Vm::invoke`], which gives the call a fresh fuel budget
//! and books what it spent under the export's name: fuel is wasmtime's deterministic instruction
//! count, so "instructions per request" does not depend on the machine. A budget that runs out
//! (a guest stuck in a loop) traps instead of hanging the test.

use crate::abi::{BufferType, Headers, LogLevel};
use crate::envoy::{Reply, StreamInfo};
use crate::grpc::Arrival;
use crate::host::Profile;
use crate::process::Process;
use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::rc::Rc;
use std::time::Duration;
use wasmtime::{Func, Instance, Linker, Memory, Module, Store, TypedFunc, Val};

/// Fuel one guest call may spend before it is stopped as runaway.
const FUEL_PER_CALL: u64 = 1_000_000_000;

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

/// Calls and fuel spent in one guest export.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Fuel {
    /// How many times it was called.
    pub calls: u64,
    /// Fuel (≈ wasm instructions) spent in those calls, including the guest allocator's.
    pub fuel: u64,
}

/// Whether a VM still gets callbacks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum VmStatus {
    /// Compiling the module at start ([`crate::HostOptions::compile`]): the requests that reach
    /// its worker wait until it is up, and are then handed to it at once.
    Compiling,
    /// Ticks, responses and requests are delivered.
    Running,
    /// Stopped by the test (`Host::stop_vm`): nothing is delivered any more.
    Stopped,
    /// The guest trapped; the message says where. Nothing is delivered any more.
    Crashed(String),
}

/// What a guest call returned.
pub(crate) struct Called {
    pub results: Vec<Val>,
    pub fuel: u64,
}

/// One instance of the module.
pub(crate) struct Vm {
    store: Store<HostState>,
    instance: Instance,
    pub status: VmStatus,
    pub fuel: BTreeMap<String, Fuel>,
    /// The requests (record indexes) that reached this VM's worker while it compiled.
    pub queued: Vec<usize>,
    last_context: u32,
    /// Callbacks looked up so far: the export (if any) and how many results it returns.
    callbacks: HashMap<String, Option<(Func, usize)>>,
}

impl Vm {
    /// Instantiates the module (every import must resolve) and runs its initializers.
    pub(crate) fn new(
        linker: &Linker<HostState>,
        module: &Module,
        state: HostState,
    ) -> wasmtime::Result<Vm> {
        let mut store = Store::new(module.engine(), state);
        store.set_fuel(FUEL_PER_CALL)?;
        let instance = linker.instantiate(&mut store, module)?;
        if instance
            .get_func(&mut store, "proxy_abi_version_0_2_1")
            .is_none()
        {
            wasmtime::bail!("the module does not export proxy_abi_version_0_2_1 (ABI 0.2.1)");
        }
        let memory = instance.get_memory(&mut store, "memory");
        let malloc = ["malloc", "proxy_on_memory_allocate"]
            .iter()
            .find_map(|name| instance.get_func(&mut store, name))
            .map(|malloc| {
                malloc
                    .typed::<i32, i32>(&store)
                    .map_err(|e| format!("{e:?}"))
            });
        store.data_mut().exports = Exports { memory, malloc };
        let mut vm = Vm {
            store,
            instance,
            status: VmStatus::Running,
            fuel: BTreeMap::new(),
            queued: Vec::new(),
            last_context: ROOT_CONTEXT,
            callbacks: HashMap::new(),
        };
        for init in ["_initialize", "_start"] {
            vm.invoke(init, &[])?;
        }
        Ok(vm)
    }

    /// Calls export `name`; `Ok(None)` if the module does not export it, else its results and
    /// the fuel the call spent.
    pub(crate) fn invoke(&mut self, name: &str, args: &[Val]) -> wasmtime::Result<Option<Called>> {
        let callback = match self.callbacks.get(name) {
            Some(known) => *known,
            None => {
                let func = self.instance.get_func(&mut self.store, name);
                let found = func.map(|func| (func, func.ty(&self.store).results().len()));
                self.callbacks.insert(name.to_string(), found);
                found
            }
        };
        let Some((func, results)) = callback else {
            return Ok(None);
        };
        let mut results = vec![Val::I32(0); results];
        self.store.set_fuel(FUEL_PER_CALL)?;
        let outcome = func.call(&mut self.store, args, &mut results);
        let spent = FUEL_PER_CALL.saturating_sub(self.store.get_fuel().unwrap_or(0));
        let fuel = match self.fuel.get_mut(name) {
            Some(fuel) => fuel,
            None => self.fuel.entry(name.to_string()).or_default(),
        };
        fuel.calls += 1;
        fuel.fuel += spent;
        outcome.map(|()| {
            Some(Called {
                results,
                fuel: spent,
            })
        })
    }

    /// The size of the module's linear memory `memory`, in 64 KiB pages (0 if it exports none).
    pub(crate) fn memory_pages(&mut self) -> u64 {
        let memory = self.state().exports.memory;
        memory.map_or(0, |memory| memory.size(&self.store))
    }

    pub(crate) fn state(&self) -> &HostState {
        self.store.data()
    }

    pub(crate) fn state_mut(&mut self) -> &mut HostState {
        self.store.data_mut()
    }

    /// A context id not used before in this VM.
    pub(crate) fn new_context(&mut self) -> u32 {
        self.last_context += 1;
        self.last_context
    }
}
