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

mod events;
mod guest;
mod observe;
mod requests;
mod sending;
mod upstreams;

use crate::abi::BufferType;
use crate::clock::Event;
use crate::error::HostError;
use crate::imports;
use crate::options::HostOptions;
use crate::process::Process;
use crate::state::{HostState, ROOT_CONTEXT};
use crate::traffic::RequestRecord;
use crate::vm::{Vm, VmStatus};
use std::cell::RefCell;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::path::Path;
use std::rc::Rc;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;
use wasmtime::{Config, Engine, Linker, Module, OptLevel};

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

/// An emulated Envoy process running one proxy-wasm module. See the crate docs for a tour.
pub struct Host {
    module: Module,
    linker: Linker<HostState>,
    /// The plugin configuration in force (the latest given to `start` or `reconfigure`).
    plugin_config: Option<String>,
    /// The other listeners, in the order they were added.
    listeners: Vec<Listener>,
    vms: Vec<Vm>,
    process: Rc<RefCell<Process>>,
    options: HostOptions,
    /// The requests sent, less the first `records_taken` (see [`Host::take_finished_records`]).
    records: Vec<RequestRecord>,
    records_taken: usize,
    next_worker: usize,
}

/// A listener besides the users' one, with a plugin of its own.
struct Listener {
    /// The address requests are sent to (`destination.address`).
    address: String,
    plugin_config: String,
    /// Its root context in each VM, by VM id.
    roots: Vec<u32>,
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

    /// Virtual time since the host started.
    pub fn now(&self) -> Duration {
        self.process.borrow().clock.now()
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
