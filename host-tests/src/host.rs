//! The orchestrator: the VMs of one Envoy process, their lifecycle, and the event loop that
//! delivers what falls due on the virtual clock.
//!
//! Like Envoy 1.40 with `--concurrency N`, the host runs one VM for the main thread (id 0) and one
//! per worker (ids 1..=N), all sharing one process ([`crate::process`]). Each VM gets Envoy's
//! start sequence: `proxy_on_context_create(1, 0)`, `proxy_on_vm_start(1, vm_config_size)`,
//! `proxy_on_configure(1, plugin_config_size)`; then ticks at the period it set. (Envoy makes
//! N+2 VMs of which N+1 tick; the one that never ticks does nothing observable here.)
//!
//! More listeners ([`Host::listen`]) run the same module with a plugin configuration of their
//! own, as a second root context in every VM (same `vm_id`, so the same shared data): a request
//! sent to a listener's address goes to its root context, and its route answers 404 itself
//! (a `direct_response`) if the plugin lets the request through.

use crate::abi::{BufferType, LogLevel, MetricKind};
use crate::clock::Event;
use crate::driver::RequestRecord;
use crate::grpc::{Arrival, RealStream};
use crate::imports;
use crate::loopback::RealCall;
use crate::process::{CallRecord, LogLine, Process, SharedDataUsage};
use crate::upstream::{Counts, Script, Upstream};
use crate::vm::{Fuel, HostState, Vm, VmStatus, ROOT_CONTEXT};
use std::cell::{RefCell, RefMut};
use std::collections::BTreeMap;
use std::fmt;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::net::SocketAddr;
use std::path::Path;
use std::rc::Rc;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;
use wasmtime::{Config, Engine, Linker, Module, OptLevel, Val};

/// How the host is set up; `HostOptions::default()` matches `config/envoy-simple.yaml` with 2 workers.
#[derive(Clone, Debug)]
pub struct HostOptions {
    /// Worker VMs (ids 1..=workers) besides the main-thread VM (id 0). Default 2.
    pub workers: usize,
    /// Route timeout for user requests (Envoy's default is 15 s).
    pub route_timeout: Duration,
    /// The request header whose value names the cluster (the route's `cluster_header`).
    pub route_header: String,
    /// The VM configuration handed to `proxy_on_vm_start`. Default empty.
    pub vm_config: String,
    /// What `proxy_get_log_level` answers (Envoy's default: info). Every log line is captured.
    pub log_level: LogLevel,
    /// What a guest trap does.
    pub on_trap: OnTrap,
    /// Which proxy the host behaves as. Default [`Profile::Envoy`].
    pub profile: Profile,
    /// How long each VM takes to compile the module when the host starts, for the window in
    /// which requests arrive before any VM can take them. NGINX opens its listeners in the
    /// master process and each worker compiles the module itself as it starts (0.5–1.5 s
    /// measured with wasmtime under load), so the requests of that window wait in the listen
    /// queue and reach the worker all at once when it is up. Default zero: every VM is up when
    /// [`Host::start`] returns.
    pub compile: Duration,
}

/// Which proxy-wasm host the host behaves as.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Profile {
    /// Envoy 1.40 ([`crate::envoy`]).
    #[default]
    Envoy,
    /// NGINX with Kong's ngx_wasm_module ([`crate::nginx`]): its import signatures, its tick
    /// rule, dispatches by `host:port` failing with no headers, NotFound for the properties it
    /// lacks, metrics that trap when used as the other kind, no response flags, NGINX's own
    /// 502 and 504.
    Nginx,
}

impl Default for HostOptions {
    fn default() -> Self {
        HostOptions {
            workers: 2,
            route_timeout: Duration::from_secs(15),
            route_header: "x-upcheck-upstream".to_string(),
            vm_config: String::new(),
            log_level: LogLevel::Info,
            on_trap: OnTrap::Fail,
            profile: Profile::Envoy,
            compile: Duration::ZERO,
        }
    }
}

/// What happens when a guest traps (a Rust panic in the filter is a trap).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnTrap {
    /// The host call that ran the guest returns [`HostError::Trap`]: the test fails, clearly.
    Fail,
    /// As in Envoy without `FAIL_RELOAD`: the VM is dead, its ticks stop, and its worker answers
    /// every request with Envoy's 503 `wasm_fail_stream`. See [`Host::vm_status`].
    Crash,
}

/// Why a host operation failed.
#[derive(Debug)]
pub enum HostError {
    /// The module did not compile, link (an import the host does not provide) or initialize.
    Load(String),
    /// `proxy_on_vm_start` or `proxy_on_configure` returned false: Envoy refuses the config.
    Rejected {
        /// The VM that refused.
        vm: usize,
        /// The callback that returned false.
        callback: &'static str,
        /// What that VM logged during the callback (the reason, normally).
        log: Vec<LogLine>,
    },
    /// The guest trapped.
    Trap {
        /// The VM that trapped.
        vm: usize,
        /// The export that was running.
        callback: String,
        /// wasmtime's account of the trap, with the wasm backtrace.
        message: String,
        /// That VM's last log lines (a Rust panic message is among them).
        log: Vec<LogLine>,
    },
    /// The guest or the test asked for something this host does not emulate.
    Unsupported(String),
}

impl fmt::Display for HostError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let lines = |f: &mut fmt::Formatter<'_>, log: &[LogLine]| {
            log.iter().try_for_each(|line| write!(f, "\n  {line}"))
        };
        match self {
            HostError::Load(message) => write!(f, "the module could not be loaded: {message}"),
            HostError::Rejected { vm, callback, log } => {
                write!(
                    f,
                    "vm{vm} {callback} returned false (configuration rejected)"
                )?;
                lines(f, log)
            }
            HostError::Trap {
                vm,
                callback,
                message,
                log,
            } => {
                write!(
                    f,
                    "vm{vm} trapped in {callback}: {message}\nits last log lines:"
                )?;
                lines(f, log)
            }
            HostError::Unsupported(what) => write!(f, "not emulated by this host: {what}"),
        }
    }
}

impl std::error::Error for HostError {}

/// Compiles `wasm` once per test process: every host of a test binary shares one engine and the
/// compiled modules (upcheck.wasm takes seconds to compile with a debug build of cranelift).
/// Cranelift does not optimize: compile time matters here, and fuel counts wasm instructions,
/// which optimization does not change.
fn compile(wasm: &[u8]) -> Result<Module, HostError> {
    static ENGINE: OnceLock<Result<Engine, String>> = OnceLock::new();
    static MODULES: Mutex<Vec<(u64, Module)>> = Mutex::new(Vec::new());
    let engine = ENGINE
        .get_or_init(|| {
            let mut config = Config::new();
            config.consume_fuel(true);
            config.cranelift_opt_level(OptLevel::None);
            Engine::new(&config).map_err(|e| format!("{e:?}"))
        })
        .as_ref()
        .map_err(|e| HostError::Load(e.clone()))?;
    let mut hasher = DefaultHasher::new();
    wasm.hash(&mut hasher);
    let key = hasher.finish();
    // Compiling under the lock keeps parallel tests from compiling the same module twice.
    let mut modules = MODULES
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Some((_, module)) = modules.iter().find(|(known, _)| *known == key) {
        return Ok(module.clone());
    }
    let module = Module::new(engine, wasm).map_err(|e| HostError::Load(format!("{e:?}")))?;
    modules.push((key, module.clone()));
    Ok(module)
}

/// How many of a VM's log lines a trap error quotes.
const TRAP_LOG_LINES: usize = 20;

/// An emulated Envoy process running one proxy-wasm module. See the crate docs for a tour.
pub struct Host {
    module: Module,
    linker: Linker<HostState>,
    /// The plugin configuration in force (the latest given to `start` or `reconfigure`).
    plugin_config: Option<String>,
    /// The other listeners, in the order they were added.
    pub(crate) listeners: Vec<Listener>,
    pub(crate) vms: Vec<Vm>,
    pub(crate) process: Rc<RefCell<Process>>,
    pub(crate) options: HostOptions,
    /// The requests sent, less the first `records_taken` (see [`Host::take_finished_records`]).
    pub(crate) records: Vec<RequestRecord>,
    pub(crate) records_taken: usize,
    pub(crate) next_worker: usize,
}

/// A listener besides the users' one, with a plugin of its own.
pub(crate) struct Listener {
    /// The address requests are sent to (`destination.address`).
    pub address: String,
    pub plugin_config: String,
    /// Its root context in each VM, by VM id.
    pub roots: Vec<u32>,
}

impl Host {
    /// Compiles `wasm` (binary, or WAT text) and instantiates the main-thread VM and the workers.
    /// Fails with [`HostError::Load`] if any import is not provided by the host.
    pub fn new(wasm: impl AsRef<[u8]>, options: HostOptions) -> Result<Host, HostError> {
        let load = |e: wasmtime::Error| HostError::Load(format!("{e:?}"));
        let module = compile(wasm.as_ref())?;
        let linker = imports::linker(module.engine(), options.profile).map_err(load)?;
        let process = Rc::new(RefCell::new(Process::default()));
        let vms = (0..=options.workers)
            .map(|vm| {
                let state = HostState::new(vm, process.clone(), options.log_level, options.profile);
                Vm::new(&linker, &module, state)
            })
            .collect::<wasmtime::Result<Vec<Vm>>>()
            .map_err(load)?;
        Ok(Host {
            module,
            linker,
            plugin_config: None,
            listeners: Vec::new(),
            vms,
            process,
            options,
            records: Vec::new(),
            records_taken: 0,
            next_worker: 0,
        })
    }

    /// [`Host::new`] with the module read from `path`.
    pub fn from_file(path: impl AsRef<Path>, options: HostOptions) -> Result<Host, HostError> {
        let path = path.as_ref();
        let wasm =
            std::fs::read(path).map_err(|e| HostError::Load(format!("{}: {e}", path.display())))?;
        Host::new(wasm, options)
    }

    /// Starts every VM (main thread first) with Envoy's sequence and `plugin_config`; with a
    /// compile time ([`HostOptions::compile`]), each when the clock reaches it.
    pub fn start(&mut self, plugin_config: &str) -> Result<(), HostError> {
        self.plugin_config = Some(plugin_config.to_string());
        let compile = self.options.compile;
        for vm in 0..self.vms.len() {
            if compile.is_zero() {
                self.start_vm(vm, plugin_config)?;
            } else {
                self.vms[vm].status = VmStatus::Compiling;
                let event = Event::VmUp { vm };
                self.process.borrow_mut().clock.schedule(compile, event);
            }
        }
        Ok(())
    }

    /// VM `vm` has compiled: it starts, then takes the requests that waited for it.
    fn vm_up(&mut self, vm: usize) -> Result<(), HostError> {
        if self.vms[vm].status != VmStatus::Compiling {
            return Ok(());
        }
        self.vms[vm].status = VmStatus::Running;
        let plugin_config = self.plugin_config.clone().unwrap_or_default();
        self.start_vm(vm, &plugin_config)?;
        for record in std::mem::take(&mut self.vms[vm].queued) {
            self.arrive_at(record, vm)?;
        }
        Ok(())
    }

    fn start_vm(&mut self, vm: usize, plugin_config: &str) -> Result<(), HostError> {
        self.start_root(vm, ROOT_CONTEXT, plugin_config)?;
        for listener in 0..self.listeners.len() {
            let root = self.vms[vm].new_context();
            self.vms[vm].state_mut().listener_roots.push(root);
            let config = self.listeners[listener].plugin_config.clone();
            let roots = &mut self.listeners[listener].roots;
            match roots.get_mut(vm) {
                Some(slot) => *slot = root,
                None => roots.push(root),
            }
            self.start_root(vm, root, &config)?;
        }
        Ok(())
    }

    /// Envoy's start of one plugin in VM `vm`: its root context, `on_vm_start`, `on_configure`.
    fn start_root(&mut self, vm: usize, root: u32, plugin_config: &str) -> Result<(), HostError> {
        self.callback(vm, "proxy_on_context_create", root, &[0])?;
        let vm_config = self.options.vm_config.clone();
        self.configure(
            vm,
            root,
            "proxy_on_vm_start",
            BufferType::VmConfiguration,
            &vm_config,
        )?;
        self.configure(
            vm,
            root,
            "proxy_on_configure",
            BufferType::PluginConfiguration,
            plugin_config,
        )
    }

    /// Adds a listener at `address` (e.g. `127.0.0.1:9902`) whose plugin, the same module in
    /// the same `vm_id`, has `plugin_config`: a request whose `destination_address` is `address`
    /// goes to it instead of the users' listener. Before [`Host::start`], which starts it in
    /// every VM after the users' plugin, as Envoy starts the listeners of its configuration.
    pub fn listen(&mut self, address: &str, plugin_config: &str) -> Result<(), HostError> {
        if self.plugin_config.is_some() {
            return Err(HostError::Unsupported(format!(
                "a listener at {address} added after the host started"
            )));
        }
        self.listeners.push(Listener {
            address: address.to_string(),
            plugin_config: plugin_config.to_string(),
            roots: Vec::new(),
        });
        Ok(())
    }

    /// Calls `proxy_on_configure` again on every VM with a new plugin configuration for the
    /// listener at `address` ([`Host::listen`]).
    pub fn reconfigure_listener(
        &mut self,
        address: &str,
        plugin_config: &str,
    ) -> Result<(), HostError> {
        let listener = self
            .listeners
            .iter()
            .position(|l| l.address == address)
            .ok_or_else(|| HostError::Unsupported(format!("no listener at {address}")))?;
        self.listeners[listener].plugin_config = plugin_config.to_string();
        for vm in 0..self.vms.len() {
            let Some(&root) = self.listeners[listener].roots.get(vm) else {
                continue;
            };
            self.configure(
                vm,
                root,
                "proxy_on_configure",
                BufferType::PluginConfiguration,
                plugin_config,
            )?;
        }
        Ok(())
    }

    /// Calls `proxy_on_configure` again on every VM with a new plugin configuration for the
    /// users' listener.
    pub fn reconfigure(&mut self, plugin_config: &str) -> Result<(), HostError> {
        self.plugin_config = Some(plugin_config.to_string());
        for vm in 0..self.vms.len() {
            self.configure(
                vm,
                ROOT_CONTEXT,
                "proxy_on_configure",
                BufferType::PluginConfiguration,
                plugin_config,
            )?;
        }
        Ok(())
    }

    fn configure(
        &mut self,
        vm: usize,
        root: u32,
        callback: &'static str,
        buffer: BufferType,
        text: &str,
    ) -> Result<(), HostError> {
        let logged_before = self.process.borrow().logs.len();
        self.vms[vm].state_mut().configuration = Some((buffer, text.as_bytes().to_vec()));
        let size = text.len() as i32;
        let accepted = self.callback(vm, callback, root, &[size]);
        self.vms[vm].state_mut().configuration = None;
        if accepted? == Some(0) {
            let log = self.process.borrow().logs[logged_before..]
                .iter()
                .filter(|line| line.vm == vm)
                .cloned()
                .collect();
            return Err(HostError::Rejected { vm, callback, log });
        }
        self.settle(vm)
    }

    /// Moves the virtual clock forward by `by`, delivering everything that falls due on the way.
    pub fn advance(&mut self, by: Duration) -> Result<(), HostError> {
        let deadline = self.now() + by;
        self.advance_to(deadline)
    }

    pub(crate) fn advance_to(&mut self, deadline: Duration) -> Result<(), HostError> {
        self.take_real_answers();
        loop {
            let event = self.process.borrow_mut().clock.pop_due(deadline);
            let Some(event) = event else { break };
            self.handle(event)?;
        }
        self.process.borrow_mut().clock.settle_at(deadline);
        Ok(())
    }

    fn handle(&mut self, event: Event) -> Result<(), HostError> {
        match event {
            Event::Tick { vm } => {
                let state = self.vms[vm].state_mut();
                state.tick_scheduled = false;
                let period = state.tick_period;
                if self.vms[vm].status != VmStatus::Running {
                    return Ok(());
                }
                if !period.is_zero() {
                    // Envoy re-arms the timer before running the tick handler.
                    self.vms[vm].state_mut().tick_scheduled = true;
                    self.process
                        .borrow_mut()
                        .clock
                        .schedule(period, Event::Tick { vm });
                }
                self.callback(vm, "proxy_on_tick", ROOT_CONTEXT, &[])?;
                self.settle(vm)
            }
            Event::VmUp { vm } => self.vm_up(vm),
            Event::CallResponse {
                vm,
                context,
                token,
                reply,
            } => {
                let state = self.vms[vm].state_mut();
                if !state.is_root(context) && !state.streams.contains_key(&context) {
                    return Ok(()); // Envoy cancels the calls of a finished stream.
                }
                // ngx_wasm_module names the filter's root context in the answer to a request's
                // own call, while the host calls made meanwhile act on the request.
                let named = match self.options.profile {
                    Profile::Nginx => state.streams.get(&context).map_or(context, |s| s.root),
                    Profile::Envoy => context,
                };
                let args = [
                    token as i32,
                    reply.headers.len() as i32,
                    reply.body.len() as i32,
                    0,
                ];
                state.call_response = Some(reply);
                if self.vms[vm].status == VmStatus::Running {
                    let now = self.now();
                    if let Some(call) = self.process.borrow_mut().call_mut(token) {
                        call.delivered = Some(now);
                    }
                }
                let args: Vec<Val> = std::iter::once(named as i32)
                    .chain(args)
                    .map(Val::I32)
                    .collect();
                let delivered = self.guest(vm, "proxy_on_http_call_response", context, &args);
                self.vms[vm].state_mut().call_response = None;
                delivered?;
                self.settle(vm)?;
                if self.options.profile == Profile::Nginx {
                    self.resume_after_calls(vm, context)?;
                }
                Ok(())
            }
            Event::GrpcArrival {
                vm,
                context,
                token,
                arrival,
            } => self.deliver_grpc(vm, context, token, arrival),
            Event::QueueReady { vm, context, queue } => {
                self.callback(vm, "proxy_on_queue_ready", context, &[queue as i32])?;
                self.settle(vm)
            }
            Event::RequestArrives { record } => self.arrive(record),
            Event::UpstreamReply { vm, context, reply } => {
                self.upstream_replied(vm, context, reply)
            }
            Event::ClientGivesUp { vm, context } => self.give_up(vm, context),
        }
    }

    /// Hands what arrived on gRPC stream `token` to the context that opened it, unless the
    /// stream was cancelled or the context is gone (Envoy resets the streams of a finished one).
    fn deliver_grpc(
        &mut self,
        vm: usize,
        context: u32,
        token: u32,
        arrival: Arrival,
    ) -> Result<(), HostError> {
        if !self.process.borrow_mut().grpc.deliver(token, &arrival) {
            return Ok(());
        }
        let state = self.vms[vm].state_mut();
        if !state.is_root(context) && !state.streams.contains_key(&context) {
            return Ok(());
        }
        let (export, last) = arrival.callback();
        state.grpc_arrival = Some(arrival);
        let delivered = self.callback(vm, export, context, &[token as i32, last]);
        self.vms[vm].state_mut().grpc_arrival = None;
        delivered?;
        self.settle(vm)
    }

    /// Runs callback `name(context, args...)` on `vm` if it is running and exports it; returns
    /// its i32 result. A trap is handled per [`OnTrap`]. Fuel spent in a request's context is
    /// booked on the request's record.
    pub(crate) fn callback(
        &mut self,
        vm: usize,
        name: &str,
        context: u32,
        args: &[i32],
    ) -> Result<Option<i32>, HostError> {
        let args: Vec<Val> = std::iter::once(context as i32)
            .chain(args.iter().copied())
            .map(Val::I32)
            .collect();
        let results = self.guest(vm, name, context, &args)?;
        Ok(results.and_then(|results| results.first().and_then(Val::i32)))
    }

    fn guest(
        &mut self,
        vm: usize,
        name: &str,
        context: u32,
        args: &[Val],
    ) -> Result<Option<Vec<Val>>, HostError> {
        let instance = &mut self.vms[vm];
        if instance.status != VmStatus::Running {
            return Ok(None);
        }
        let state = instance.state_mut();
        state.effective_context = context;
        state.callback.clear();
        state.callback.push_str(name);
        match instance.invoke(name, args) {
            Ok(None) => Ok(None),
            Ok(Some(called)) => {
                let record = instance.state().streams.get(&context).map(|s| s.record);
                if let Some(record) = record.and_then(|record| self.record_mut(record)) {
                    record.fuel += called.fuel;
                }
                Ok(Some(called.results))
            }
            Err(error) => {
                let message = format!("{error:?}");
                instance.status = VmStatus::Crashed(format!("{name}: {message}"));
                let log: Vec<LogLine> = self.vm_logs(vm);
                let start = log.len().saturating_sub(TRAP_LOG_LINES);
                let trap = HostError::Trap {
                    vm,
                    callback: name.to_string(),
                    message,
                    log: log[start..].to_vec(),
                };
                match self.options.on_trap {
                    OnTrap::Fail => Err(trap),
                    OnTrap::Crash => {
                        eprintln!("{trap}");
                        Ok(None)
                    }
                }
            }
        }
    }

    /// Calls any export of VM `vm` with the root context effective, then carries out what it
    /// asked for. An escape hatch for tests of the host itself, with hand-written guests.
    pub fn call(
        &mut self,
        vm: usize,
        export: &str,
        args: &[Val],
    ) -> Result<Option<Vec<Val>>, HostError> {
        let results = self.guest(vm, export, ROOT_CONTEXT, args)?;
        self.settle(vm)?;
        Ok(results)
    }

    /// Virtual time since the host started.
    pub fn now(&self) -> Duration {
        self.process.borrow().clock.now()
    }

    /// Scripts upstream (cluster) `name`, creating it on first use at `127.0.0.1:3001`,
    /// `127.0.0.1:3002`... in order of creation. An unscripted upstream answers 200 everywhere.
    pub fn upstream(&mut self, name: &str) -> Script<'_> {
        let upstream = RefMut::map(self.process.borrow_mut(), |process| {
            let port = 3001 + process.upstreams.len() as u16;
            process
                .upstreams
                .entry(name.to_string())
                .or_insert_with(|| Upstream::new(port))
        });
        Script::new(upstream)
    }

    /// The `127.0.0.1:port` address of upstream `name`, if it exists: what an NGINX
    /// configuration names it by ([`Profile::Nginx`] dispatches and routes by address).
    pub fn address(&self, name: &str) -> Option<String> {
        let process = self.process.borrow();
        process.upstreams.get(name).map(|u| u.address.clone())
    }

    /// Http calls to cluster `name` go to the real HTTP/1.1 server at `address` (etcd's client
    /// URL, say) from now on, instead of a scripted upstream ([`crate::loopback`]), and gRPC
    /// streams to it over HTTP/2 in plaintext ([`crate::grpc`]). Each answer, and each thing
    /// arriving on a stream, is delivered at the first [`Host::advance`] after it arrived, at that
    /// virtual instant: the caller paces the virtual clock to real time.
    pub fn real_cluster(&mut self, name: &str, address: SocketAddr) {
        self.process.borrow_mut().loopback.serve(name, address);
    }

    /// Every call to a real server's cluster answered so far, in the order taken in.
    pub fn real_calls(&self) -> Vec<RealCall> {
        self.process.borrow().loopback.answered.clone()
    }

    /// Every gRPC stream opened to a real server's cluster so far ([`crate::grpc`]), in order,
    /// with what went each way and how it ended.
    pub fn real_streams(&self) -> Vec<RealStream> {
        self.process.borrow().grpc.records.clone()
    }

    /// Puts what the real servers sent since the last look on the agenda, due now: http call
    /// answers, then what arrived on gRPC streams, in order.
    fn take_real_answers(&mut self) {
        let mut process = self.process.borrow_mut();
        let arrivals = process.grpc.take_arrivals();
        for (vm, context, token, reply) in process.loopback.take_answers() {
            if let Some(call) = process.call_mut(token) {
                call.status = Some(reply.status);
                call.details.clone_from(&reply.details);
            }
            let event = Event::CallResponse {
                vm,
                context,
                token,
                reply,
            };
            process.clock.schedule(Duration::ZERO, event);
        }
        for (vm, context, token, arrival) in arrivals {
            let event = Event::GrpcArrival {
                vm,
                context,
                token,
                arrival,
            };
            process.clock.schedule(Duration::ZERO, event);
        }
    }

    /// What upstream `cluster` was sent so far (zero counts if it does not exist).
    pub fn counts(&self, cluster: &str) -> Counts {
        let process = self.process.borrow();
        process
            .upstreams
            .get(cluster)
            .map(|upstream| upstream.counts.clone())
            .unwrap_or_default()
    }

    /// Http calls (probes) dispatched to `cluster` so far, all paths.
    pub fn probes_sent(&self, cluster: &str) -> u64 {
        self.counts(cluster).probes.values().sum()
    }

    /// Every http call (probe) the guests dispatched so far, in order.
    pub fn calls(&self) -> Vec<CallRecord> {
        self.process.borrow().calls.clone()
    }

    /// User requests routed to `cluster` so far, all paths.
    pub fn requests_routed(&self, cluster: &str) -> u64 {
        self.counts(cluster).requests.values().sum()
    }

    /// The value of counter or gauge `name` (with or without Envoy's `wasmcustom.` prefix).
    pub fn metric(&self, name: &str) -> Option<u64> {
        let name = name.strip_prefix("wasmcustom.").unwrap_or(name);
        let process = self.process.borrow();
        let metric = process.metrics.get(name)?;
        (metric.kind != MetricKind::Histogram).then_some(metric.value)
    }

    /// The values recorded in histogram `name`.
    pub fn histogram(&self, name: &str) -> Vec<u64> {
        let name = name.strip_prefix("wasmcustom.").unwrap_or(name);
        let process = self.process.borrow();
        process
            .metrics
            .get(name)
            .map(|metric| metric.samples.clone())
            .unwrap_or_default()
    }

    /// Every counter and gauge by name.
    pub fn metrics(&self) -> BTreeMap<String, u64> {
        let process = self.process.borrow();
        process
            .metrics
            .iter()
            .filter(|(_, metric)| metric.kind != MetricKind::Histogram)
            .map(|(name, metric)| (name.clone(), metric.value))
            .collect()
    }

    /// Every line the guests logged, in order.
    pub fn logs(&self) -> Vec<LogLine> {
        self.process.borrow().logs.clone()
    }

    fn vm_logs(&self, vm: usize) -> Vec<LogLine> {
        let process = self.process.borrow();
        process
            .logs
            .iter()
            .filter(|line| line.vm == vm)
            .cloned()
            .collect()
    }

    /// The value and CAS stored under shared-data `key`.
    pub fn shared_data(&self, key: &str) -> Option<(Vec<u8>, u32)> {
        self.process.borrow().get_shared(key).cloned()
    }

    /// How many shared-data keys the process holds, and their bytes (keys and values).
    pub fn shared_data_usage(&self) -> SharedDataUsage {
        self.process.borrow().shared_data_usage()
    }

    /// The size of VM `vm`'s linear memory, in 64 KiB wasm pages.
    pub fn memory_pages(&mut self, vm: usize) -> u64 {
        self.vms[vm].memory_pages()
    }

    /// Calls and fuel per export, summed over all VMs.
    pub fn fuel(&self) -> BTreeMap<String, Fuel> {
        let mut total: BTreeMap<String, Fuel> = BTreeMap::new();
        for vm in &self.vms {
            for (name, fuel) in &vm.fuel {
                let sum = total.entry(name.clone()).or_default();
                sum.calls += fuel.calls;
                sum.fuel += fuel.fuel;
            }
        }
        total
    }

    /// Calls and fuel per export of VM `vm`.
    pub fn vm_fuel(&self, vm: usize) -> BTreeMap<String, Fuel> {
        self.vms[vm].fuel.clone()
    }

    /// Number of VMs (main thread + workers).
    pub fn vm_count(&self) -> usize {
        self.vms.len()
    }

    /// Whether VM `vm` still gets callbacks.
    pub fn vm_status(&self, vm: usize) -> VmStatus {
        self.vms[vm].status.clone()
    }

    /// Freezes VM `vm` as if its thread hung: no more ticks, responses, queue or request
    /// callbacks; new user requests go to the other workers.
    pub fn stop_vm(&mut self, vm: usize) {
        if self.vms[vm].status == VmStatus::Running {
            self.vms[vm].status = VmStatus::Stopped;
        }
    }

    /// Replaces VM `vm`, stopped or crashed, with a fresh instance of the module, as Envoy's
    /// `failure_policy: FAIL_RELOAD` does: it gets Envoy's start sequence with the plugin
    /// configuration in force and shares the process (shared data, stats, upstreams) with the
    /// other VMs. What was due to the old instance (ticks, call answers, responses) is dropped,
    /// and its gRPC streams are reset; the user requests it held stay `Pending`.
    pub fn restart_vm(&mut self, vm: usize) -> Result<(), HostError> {
        match self.vms.get(vm).map(|instance| &instance.status) {
            None => {
                return Err(HostError::Unsupported(format!(
                    "restarting vm{vm}, which does not exist"
                )))
            }
            Some(VmStatus::Running) => {
                return Err(HostError::Unsupported(format!(
                    "restarting vm{vm}, which is running"
                )))
            }
            Some(_) => {}
        }
        let Some(plugin_config) = self.plugin_config.clone() else {
            return Err(HostError::Unsupported(format!(
                "restarting vm{vm} before the host started"
            )));
        };
        {
            let mut process = self.process.borrow_mut();
            process.clock.forget_vm(vm);
            process.grpc.forget_vm(vm);
        }
        let state = HostState::new(
            vm,
            self.process.clone(),
            self.options.log_level,
            self.options.profile,
        );
        self.vms[vm] = Vm::new(&self.linker, &self.module, state)
            .map_err(|e| HostError::Load(format!("{e:?}")))?;
        self.start_vm(vm, &plugin_config)
    }
}

impl Drop for Host {
    /// A failing test shows what the guests logged.
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("--- guest log ---");
            for line in &self.process.borrow().logs {
                eprintln!("{line}");
            }
        }
    }
}
