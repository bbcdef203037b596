//! What the policy tests share: a proxy of one VM around a [`Pool`], driven through the same
//! entry points the module uses, and time in readable units.
//!
//! [`Proxy`] plays the adapter's part with no host: it holds the probing lease, answers probes
//! with what a backend or Envoy would send for each outcome, and keeps the process-wide passive
//! table in memory, applying each change the pool asks for (a tick's request counts included)
//! and handing the written table back, and the history of changes likewise. [`Proxy::serve`] sends real traffic through it: picks,
//! requests in flight, ticks.

#![allow(dead_code)] // each test file uses its own subset

use std::ops::{Deref, DerefMut};
use std::time::Duration;
use upcheck_policy::config::HealthChecks;
use upcheck_policy::etcd::shown::Shown;
use upcheck_policy::etcd::{OpenWatch, Request};
use upcheck_policy::history::HistoryTable;
use upcheck_policy::host::{self, Dispatch, Host, PassiveWrite};
use upcheck_policy::tables::{ActiveTable, PassiveChange, PassiveTable};
use upcheck_policy::{
    Config, Effects, Event, MadeBy, Member, Pick, Pool, ProbeAnswer, ProbeOutcome, ProxyFailure,
    RequestOutcome, Retried, Routed, Said,
};

pub fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

pub fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// The seed config (10 s / 5 s, 3 in 10 s) over `names`, with `extra` top-level fields.
pub fn config(names: &[&str], extra: &str) -> Config {
    let ups: Vec<String> = names
        .iter()
        .map(|n| format!(r#"{{"name":"{n}"}}"#))
        .collect();
    let sep = if extra.is_empty() { "" } else { "," };
    let json = format!(r#"{{"upstreams":[{}]{sep}{extra}}}"#, ups.join(","));
    Config::parse(json.as_bytes()).expect("test config parses")
}

/// One VM holding the probing lease, with the process-wide passive table.
pub struct Proxy {
    pub pool: Pool,
    pub table: PassiveTable,
    /// Every event so far, in order.
    pub events: Vec<Event>,
    /// Every backend (by position) the pool asked to probe, in order; the tests send and answer
    /// probes themselves ([`Proxy::probe`]).
    pub probes_asked: Vec<usize>,
    /// How many times the pool asked for the probe table to be published.
    pub publications: usize,
    /// The process-wide history of changes, as the pool appended to it.
    pub history: HistoryTable,
    /// Every gRPC health Watch the pool opened: the backend (by position) and the stream's token.
    pub watches: Vec<(usize, u32)>,
    /// Every gRPC stream the pool cancelled, by token.
    pub cancelled: Vec<u32>,
    /// What the proxy says in refusing to open a Watch, while it refuses.
    pub refuse_watches: Option<&'static str>,
    next_token: u32,
    next_request: u32,
}

/// The host the pool's effects are carried out on ([`host::carry_out`], as in the module): it
/// applies each change to the proxy's table in memory and records everything else it is asked.
struct Recorder<'a> {
    table: &'a mut PassiveTable,
    events: &'a mut Vec<Event>,
    probes_asked: &'a mut Vec<usize>,
    publications: &'a mut usize,
    history: &'a mut HistoryTable,
    watches: &'a mut Vec<(usize, u32)>,
    cancelled: &'a mut Vec<u32>,
    refuse_watches: Option<&'static str>,
    next_token: &'a mut u32,
}

impl Host<()> for Recorder<'_> {
    fn report(&mut self, _pool: &Pool, event: &Event) {
        self.events.push(event.clone());
    }

    fn share(&mut self, change: &PassiveChange, checks: &HealthChecks) -> Option<PassiveWrite> {
        let applied = change.apply(self.table, checks);
        Some(PassiveWrite {
            table: self.table.clone(),
            applied,
        })
    }

    fn probe(&mut self, _config: &Config, index: usize, _member: &Member<()>) -> Dispatch {
        self.probes_asked.push(index);
        Dispatch::Left
    }

    fn publish_active(&mut self, _table: ActiveTable) {
        *self.publications += 1;
    }

    fn record(&mut self, append: &dyn Fn(&mut HistoryTable)) -> Option<HistoryTable> {
        append(self.history);
        Some(self.history.clone())
    }

    // A proxy of these tests is alone: the fleet of balancers has its own tests
    // (`upcheck_policy::etcd`), against an etcd in memory.
    fn call_etcd(&mut self, _cluster: &str, _request: &Request) -> Result<u32, &'static str> {
        Err("no etcd in these tests")
    }

    fn open_watch(&mut self, _open: &OpenWatch) -> Result<u32, &'static str> {
        Err("no etcd in these tests")
    }

    fn open_health_watch(
        &mut self,
        _config: &Config,
        index: usize,
        _member: &Member<()>,
    ) -> Result<u32, &'static str> {
        if let Some(why) = self.refuse_watches {
            return Err(why);
        }
        let token = *self.next_token;
        *self.next_token += 1;
        self.watches.push((index, token));
        Ok(token)
    }

    fn cancel_stream(&mut self, token: u32) {
        self.cancelled.push(token);
    }

    fn show_fleet(&mut self, _pool: &Pool, _shown: &Shown) {}
}

/// One request [`Proxy::serve`] sent.
#[derive(Debug, Clone)]
pub struct Served {
    /// When it was sent.
    pub at: Duration,
    /// The backend it went to.
    pub name: String,
    /// How it ended; `None` if it never did.
    pub outcome: Option<RequestOutcome>,
}

/// The module's tick period.
pub use upcheck_policy::TICK;

impl Deref for Proxy {
    type Target = Pool;
    fn deref(&self) -> &Pool {
        &self.pool
    }
}

impl DerefMut for Proxy {
    fn deref_mut(&mut self) -> &mut Pool {
        &mut self.pool
    }
}

impl Proxy {
    /// Backend `index` as a request the pool never saw routed names it.
    pub fn routed(&self, index: usize) -> Routed {
        Routed {
            index,
            generation: self.pool.generation(),
            flight: None,
            timed: None,
        }
    }

    /// A proxy configured with `config` at `now`, holding the lease.
    pub fn new(config: Config, now: Duration) -> Proxy {
        let mut pool = Pool::new(config, now, |_| ());
        let effects = pool.lease(upcheck_policy::LeaseHeld::Here { seed: 42 }, now);
        let mut proxy = Proxy {
            pool,
            table: PassiveTable::new(),
            events: Vec::new(),
            probes_asked: Vec::new(),
            publications: 0,
            history: HistoryTable::new(),
            watches: Vec::new(),
            cancelled: Vec::new(),
            refuse_watches: None,
            next_token: 1,
            next_request: 1,
        };
        proxy.carry_out(effects, now);
        proxy
    }

    /// Carries out what the pool asked for, as the module does: shares its changes, records its
    /// events and the probes it asked for.
    pub fn carry_out(&mut self, effects: Effects, now: Duration) {
        let mut recorder = Recorder {
            table: &mut self.table,
            events: &mut self.events,
            probes_asked: &mut self.probes_asked,
            publications: &mut self.publications,
            history: &mut self.history,
            watches: &mut self.watches,
            cancelled: &mut self.cancelled,
            refuse_watches: self.refuse_watches,
            next_token: &mut self.next_token,
        };
        host::carry_out(&mut self.pool, &mut recorder, effects, now);
    }

    /// Takes a new configuration, and wins its lease.
    pub fn reconfigure(&mut self, config: Config, now: Duration) {
        let effects = self.pool.configure(config, now, |_| ());
        self.carry_out(effects, now);
        let effects = self
            .pool
            .lease(upcheck_policy::LeaseHeld::Here { seed: 42 }, now);
        self.carry_out(effects, now);
    }

    /// Time passes to `now`; returns the backends (by position) the prober must probe now.
    pub fn tick(&mut self, now: Duration) -> Vec<usize> {
        let effects = self.pool.tick(now);
        let asked = self.probes_asked.len();
        self.carry_out(effects, now);
        self.probes_asked.split_off(asked)
    }

    /// A probe of `name` settles at `at` with `outcome`, answered as a backend or Envoy would.
    pub fn probe(&mut self, name: &str, outcome: ProbeOutcome, at: Duration) {
        self.probe_sent_at(name, outcome, at, at);
    }

    /// A probe of `name` sent at `sent` settles at `at` with `outcome`.
    pub fn probe_sent_at(
        &mut self,
        name: &str,
        outcome: ProbeOutcome,
        sent: Duration,
        at: Duration,
    ) {
        let i = self.pool.index_of(name).expect("known backend");
        let token = self.next_token;
        self.next_token += 1;
        let _ = self.pool.probe_sent(i, token, sent);
        let (status, made_by) = match outcome {
            ProbeOutcome::Pass => (200, MadeBy::Backend),
            ProbeOutcome::Soft(Said::Status(status)) => (status, MadeBy::Backend),
            ProbeOutcome::Soft(said) => panic!("an HTTP probe answers by its status: {said:?}"),
            ProbeOutcome::Timeout(_) => (504, MadeBy::Proxy),
            ProbeOutcome::Refused => (503, MadeBy::Proxy),
        };
        let answer = ProbeAnswer {
            status,
            made_by,
            signalled: false,
            body: b"",
        };
        let effects = self.pool.probe_answered(token, answer, at);
        self.carry_out(effects, at);
    }

    /// A request to `name` ends at `at` with `outcome`.
    pub fn request(&mut self, name: &str, outcome: RequestOutcome, at: Duration) {
        let i = self.pool.index_of(name).expect("known backend");
        let effects = self
            .pool
            .request_ended(0, self.routed(i), Retried::No, outcome, || at)
            .unwrap_or_default();
        self.carry_out(effects, at);
    }

    /// Sends `per_second` requests a second from `from` until `until` where the pool picks, with
    /// a tick every [`TICK`]; `answer` says how a request to (name, start) ends at once, or that it
    /// never does (`None`: it stays in flight). Requests are not timed, as in the module without
    /// `unhealthy_latency`.
    pub fn serve(
        &mut self,
        from: Duration,
        until: Duration,
        per_second: u32,
        mut answer: impl FnMut(&str, Duration) -> Option<RequestOutcome>,
    ) -> Vec<Served> {
        let every = secs(1) / per_second;
        let mut next_tick = from;
        let mut next_request = from;
        let mut served = Vec::new();
        while next_tick < until || next_request < until {
            if next_tick <= next_request {
                self.tick(next_tick);
                next_tick += TICK;
                continue;
            }
            let at = next_request;
            next_request += every;
            let Pick::Backend(i) = self.pool.pick(at) else {
                continue;
            };
            let name = self.pool.members()[i].name().to_owned();
            let id = self.next_request;
            self.next_request += 1;
            let (routed, _) = self.pool.request_routed(id, i, None, false);
            let outcome = answer(&name, at);
            if let Some(outcome) = outcome {
                let effects = self
                    .pool
                    .request_ended(id, routed, Retried::No, outcome, || at)
                    .unwrap_or_default();
                self.carry_out(effects, at);
            }
            served.push(Served { at, name, outcome });
        }
        served
    }

    /// Names of the backends that take traffic.
    pub fn routable(&self) -> Vec<&str> {
        self.pool
            .members()
            .iter()
            .filter(|m| m.routable)
            .map(|m| m.name())
            .collect()
    }

    /// Per backend, whether it is ejected.
    pub fn ejected(&self) -> Vec<bool> {
        self.pool.members().iter().map(|m| m.ejected()).collect()
    }
}

/// A proxy over the seed config for `names`, started at zero.
pub fn pool(names: &[&str]) -> Proxy {
    Proxy::new(config(names, ""), Duration::ZERO)
}

/// A proxy over `config` started at zero, every backend having passed a probe at `at`.
pub fn given_every_backend_passing_at(config: Config, at: Duration) -> Proxy {
    let mut proxy = Proxy::new(config, Duration::ZERO);
    let names: Vec<String> = proxy
        .members()
        .iter()
        .map(|m| m.name().to_owned())
        .collect();
    for name in &names {
        proxy.probe(name, ProbeOutcome::Pass, at);
    }
    proxy
}

/// `names` over the seed config with `extra`, each having passed its first probe at 10 ms.
pub fn given_backends_passing_their_probes(names: &[&str], extra: &str) -> Proxy {
    given_every_backend_passing_at(config(names, extra), ms(10))
}

/// app1 and app2 over the seed config, both having passed their first probe at 10 ms.
pub fn given_two_backends_passing_their_probes() -> Proxy {
    given_backends_passing_their_probes(&["app1", "app2"], "")
}

/// A probe answer with `status`, made by the backend, with no drain signal and no body.
pub fn answer_from_backend(status: u16) -> ProbeAnswer<'static> {
    ProbeAnswer {
        status,
        made_by: MadeBy::Backend,
        signalled: false,
        body: b"",
    }
}

pub fn probe(proxy: &mut Proxy, name: &str, outcome: ProbeOutcome, at: Duration) {
    proxy.probe(name, outcome, at);
}

pub fn request(proxy: &mut Proxy, name: &str, outcome: RequestOutcome, at: Duration) {
    proxy.request(name, outcome, at);
}

pub fn answered(status: u16) -> RequestOutcome {
    RequestOutcome::Answered {
        status,
        latency: ms(5),
        grpc: None,
    }
}

pub const REFUSED: RequestOutcome = RequestOutcome::Failed(ProxyFailure::Refused);
pub const SOFT_503: ProbeOutcome = ProbeOutcome::Soft(Said::Status(503));
pub const TIMEOUT: ProbeOutcome = ProbeOutcome::Timeout(Duration::from_secs(5));

/// Names of the backends `n` picks at `at` go to, in order.
pub fn picks(proxy: &mut Proxy, n: usize, at: Duration) -> Vec<String> {
    (0..n)
        .map(|_| match proxy.pool.pick(at) {
            Pick::Backend(i) => proxy.pool.members()[i].name().to_owned(),
            Pick::Wait => "wait".to_string(),
            Pick::Probe(i) => format!("probe {}", proxy.pool.members()[i].name()),
        })
        .collect()
}

pub fn routable(proxy: &Proxy) -> Vec<&str> {
    proxy.routable()
}
