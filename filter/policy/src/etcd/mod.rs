//! Several balancers, one view of health, shared through etcd: this balancer's part in the fleet
//! of balancers ([`FleetPart`]: its lease, its probe duties, what it publishes and what it reads),
//! over etcd's JSON gateway ([`gateway`]). (The pool's membership, which backends it has, is the
//! operators' own key beside it: [`keys::MEMBERSHIP`].)
//!
//! With N balancers in front of M backends, each probing every backend, a backend gets N probes
//! per interval and each balancer must see a failure for itself. With a `fleet` object
//! ([`upcheck_config::fleet`]), the VM that probes for its Envoy ([`crate::lease`]) also speaks
//! for it in etcd, where the balancers of a pool meet under one prefix ([`keys`], the layout
//! that `upcheck backends` uses too):
//!
//! - `{prefix}/v1/balancers/{lease}`: one key per balancer, living by its etcd lease, so the
//!   balancers can count themselves;
//! - `{prefix}/v1/duty/{backend}`: which balancer probes that backend, created only if absent
//!   (a transaction comparing its create revision with 0) and living by the holder's lease, so a
//!   balancer that dies or loses etcd loses its duties when its lease expires, and another takes
//!   them. Each balancer claims free duties up to its share (M / N, rounded up), starting at a
//!   place of its own in the list, and gives one back per tick while it holds more, so duties
//!   spread over the balancers rather than all landing on the first;
//! - `{prefix}/v1/active/{backend}`: the holder's probe state of that backend, published after
//!   each result and living by the holder's lease.
//! - `{prefix}/v1/failures/{lease}/{backend}`: the request failures each balancer's own process
//!   counted at that backend, living by its lease, which the others count toward `max_fails`
//!   ([`FleetPart::evidence`]);
//! - `{prefix}/v1/traffic/{lease}`: the request outcomes each balancer's process counted, per
//!   backend, living by its lease, which the others add to theirs in the peer comparison
//!   ([`traffic`]);
//! - `{prefix}/v1/ejected/{backend}`: an outlier ejection one balancer decided, living by a lease
//!   of its own that ends with it, which every other balancer holds until that end
//!   ([`ejections`]);
//! - `{prefix}/v1/membership` and `{prefix}/v1/applied/{balancer}`: the operators' membership
//!   of the fleet and each follower's report of it (`upcheck backends`), which the balancers
//!   read past.
//!
//! Every balancer reads the prefix once and follows it with etcd's Watch over a gRPC stream
//! (`fleet.watch_cluster`, [`watch`]), or, without one (a host without gRPC streams), reads it
//! every [`READ_EVERY`] (a read that failed once more after [`READ_AGAIN`]); it takes a
//! published result in as its own workers take its prober's
//! ([`crate::pool::Pool::fleet_view`]); the backends whose duty is elsewhere are not probed
//! here.
//!
//! Fail local, never fail closed: without a usable read for one lease TTL (etcd down, slow, or
//! answering garbage), a balancer probes every backend itself again, exactly as without a
//! `fleet`, and says so once; when etcd answers again it rejoins without a burst (the backends it
//! probes keep their schedule, and it stops probing those another balancer holds). What etcd
//! holds is untrusted: a value that does not parse, was written by another version, or claims a
//! holder other than the lease it lives by is ignored with one log line per key. What can take a
//! backend out is what the balancers publish: a probe result of its duty holder, failures and
//! request counts under a balancer's lease, an ejection under a lease of its own; so whoever may
//! write the prefix can take backends out (up to the ejection cap and the pool guard), and etcd's
//! role for the balancers should be the only one that may.
//!
//! The module is pure: requests go out as values ([`Request`]), the adapter sends them with
//! `dispatch_http_call` to the `fleet.cluster` and hands back each answer
//! ([`FleetPart::answered`]); what happened to say goes out as [`Note`]s.
//!
//! Each concern of the part has a file of its own: joining the fleet (`join`: lease and
//! authentication), probe duties (`duty`), probe results published (`publish`), falling back
//! to local (`fallback`), following the prefix by reads or a watch (`following`), etcd's
//! answers (`answers`) and what a read takes in, untrusted (`untrusted`).

mod answers;
mod clocks;
mod duty;
pub mod ejections;
mod evidence;
mod fallback;
mod following;
pub mod gateway;
mod join;
pub mod json;
pub mod keys;
mod publish;
pub mod shown;
pub mod traffic;
mod untrusted;
pub mod watch;

use crate::active::ActiveHealth;
use crate::level::Level;
use crate::outlier::Standing;
use crate::time::Time;
use std::time::Duration;
use upcheck_config::fleet::Fleet as Settings;

/// How often the prefix is read: often enough that a result published by a duty holder reaches
/// every balancer within a second.
pub const READ_EVERY: Duration = Duration::from_millis(500);

/// How soon a read that failed is tried once more: a member that is down is refused at once, and
/// Envoy's round robin sends the next try to another member. A second failure in a row waits
/// [`READ_EVERY`] again, so an etcd that is down or overloaded is asked no more often than when
/// it answers.
pub const READ_AGAIN: Duration = Duration::from_millis(100);

/// How much of an etcd answer is read at most.
pub const MAX_ANSWER: usize = 4 << 20;

/// One call to etcd, as a value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Call {
    /// `/v3/auth/authenticate`, for a token.
    Authenticate,
    /// `/v3/lease/grant`: this balancer's lease.
    Grant,
    /// `/v3/lease/keepalive` of the lease.
    KeepAlive,
    /// `/v3/kv/put` of this balancer's key.
    Register,
    /// `/v3/kv/range` of the prefix.
    Read,
    /// `/v3/kv/txn`: take this backend's probe duty if nobody holds it.
    Claim(String),
    /// `/v3/kv/txn`: give this backend's probe duty back.
    Release(String),
    /// `/v3/kv/put`: this backend's probe state.
    Publish(String, ActiveHealth),
    /// `/v3/kv/put`: the failures this balancer counted at this backend, as the value
    /// ([`FleetPart::evidence`]).
    Evidence(String, String),
    /// `/v3/kv/put`: the request outcomes this balancer counted ([`traffic`]).
    Traffic(traffic::Counts),
    /// `/v3/lease/grant`: a lease for this ejection of this backend, as long as it lasts
    /// ([`ejections`]).
    GrantEjection(String, Standing),
    /// `/v3/kv/put`: this backend's ejection, ending then, under its own lease.
    Eject(String, Time),
}

/// A request for the adapter to send to `fleet.cluster`: `POST path` with `body` (JSON), the
/// `authorization` header when `token` is set, and this timeout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// What it is for; handed back with its token ([`FleetPart::sent`]).
    pub call: Call,
    /// The gateway's path.
    pub path: &'static str,
    /// The JSON body.
    pub body: String,
    /// etcd's auth token, when etcd has authentication on.
    pub token: Option<String>,
    /// How long to wait for the answer.
    pub timeout: Duration,
}

/// Something to log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Note {
    /// How loud.
    pub level: Level,
    /// What happened.
    pub text: String,
}

/// Where a backend's probe duty is, as this balancer sees it.
#[derive(Debug, Clone, PartialEq)]
pub enum Duty {
    /// Probed here: this balancer holds the duty, or the fleet is not in use (alone, or fallen
    /// back to local).
    Here,
    /// Probed by another balancer (or about to be, by whichever claims it first).
    Elsewhere {
        /// The holder's lease ID (its name in the fleet, shown in hex); `None` while nobody
        /// holds it.
        holder: Option<i64>,
        /// The probe state the holder published, if any.
        health: Option<ActiveHealth>,
    },
}

/// This balancer's part in the fleet: its lease, what it last read, what is on the wire.
#[derive(Debug, Clone)]
pub struct FleetPart {
    settings: Settings,
    keys: keys::Layout,
    started: Time,
    join: join::Join,
    on_wire: Vec<(u32, Call)>,
    /// When the prefix was last read, when a read last went out, and how many reads in a row
    /// have failed since.
    read: Option<Time>,
    asked: Option<Time>,
    failed_reads: u32,
    balancers: usize,
    /// By backend key, the holder's lease.
    duties: Vec<(String, i64)>,
    results: publish::Results,
    local: bool,
    why: String,
    refused: Vec<String>,
    notes: Vec<Note>,
    evidence: evidence::SharedFailures,
    traffic: traffic::PeerCounts,
    ejections: ejections::Ejections,
    follow: Option<watch::Follow>,
}

/// What a message on the watch's stream came to, for the adapter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Watched {
    /// Whether the stream stays open (else the adapter cancels it: etcd ended the watch, or the
    /// message was garbage; the next tick reads or reopens).
    pub keep: bool,
    /// Whether the fleet's view changed (keys taken in, or the view current again), so that the
    /// pool is to take it in now; changes that can wait for the tick (request counts) leave it
    /// unchanged until then.
    pub view_changed: bool,
}

/// A watch of the prefix for the adapter to open: a gRPC stream to `cluster`
/// ([`watch::SERVICE`], [`watch::METHOD`]) with `metadata`, and `message` sent on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenWatch {
    /// The cluster (`fleet.watch_cluster`).
    pub cluster: String,
    /// The stream's initial metadata: `hasleader` (a member without a leader ends the watch
    /// rather than going silent) and, with authentication, etcd's `token`.
    pub metadata: Vec<(&'static str, String)>,
    /// The watch's create request.
    pub message: Vec<u8>,
}

/// What this balancer asks of etcd, as a value the host carries out
/// ([`crate::host::carry_out`]), which hands back what came of it through the pool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToEtcd {
    /// A call to etcd's JSON gateway at `fleet.cluster`.
    Call(Request),
    /// The watch to open on `fleet.watch_cluster`.
    Watch(OpenWatch),
    /// A gRPC stream to cancel: the watch of a part in the fleet that ended, or one that is
    /// not (any more) the watch's.
    Cancel(u32),
}

impl FleetPart {
    /// A balancer that has not spoken to etcd yet, as of `now`: nothing is probed here until the
    /// first read says what is free, or one lease TTL passes without one.
    pub fn new(settings: Settings, now: Time) -> FleetPart {
        let keys = keys::Layout::new(&settings.prefix);
        FleetPart {
            started: now,
            join: join::Join::default(),
            on_wire: Vec::new(),
            read: None,
            asked: None,
            failed_reads: 0,
            balancers: 0,
            duties: Vec::new(),
            results: publish::Results::default(),
            local: false,
            why: "no answer from etcd yet".into(),
            refused: Vec::new(),
            notes: Vec::new(),
            evidence: evidence::SharedFailures::default(),
            traffic: traffic::PeerCounts::default(),
            ejections: ejections::Ejections::default(),
            follow: settings
                .watch_cluster
                .clone()
                .map(|cluster| watch::Follow::new(cluster, keys.clone())),
            keys,
            settings,
        }
    }

    /// The settings in force.
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    fn ttl(&self) -> Duration {
        self.settings.lease_ttl
    }

    fn timeout(&self) -> Duration {
        (self.ttl() / 3).min(Duration::from_secs(2))
    }

    /// What to log since the last look.
    pub fn take_notes(&mut self) -> Vec<Note> {
        std::mem::take(&mut self.notes)
    }

    fn note(&mut self, level: Level, text: String) {
        self.notes.push(Note { level, text });
    }

    /// Time passing, with the probe state of the backends this balancer's pool probes (by key):
    /// the calls to make now.
    pub fn tick(&mut self, now: Time, own: &[(String, ActiveHealth)]) -> Vec<Request> {
        // A watch in place holds every change as etcd commits it, and ends when its member goes
        // or loses its leader: while it stands, the view is current. But a path that drops every
        // packet (a firewall, a partition) ends no stream: the view counts as current only while
        // etcd also answers the lease's keepalives, so a balancer cut from etcd that way falls
        // back to local within two lease TTLs.
        let answering = self
            .last_kept()
            .is_some_and(|kept| now.saturating_sub(kept) <= self.ttl());
        if answering && self.follow.as_ref().is_some_and(watch::Follow::live) {
            self.read = Some(now);
        }
        self.judge(now);
        let mut out = Vec::new();
        if !self.join(now, &mut out) {
            return out;
        }
        self.read_due(now, &mut out);
        if let (Some(lease), true, false) = (self.lease(), self.join.registered, self.local) {
            if self.read.is_some_and(|r| r >= self.started) {
                self.claim(lease, own, &mut out);
                self.publish(lease, own, now, &mut out);
            }
        }
        out
    }
}

/// Whether what was last done `at` (never: `None`) is due again at `now`, done `every` so often.
fn due(now: Time, at: Option<Time>, every: Duration) -> bool {
    at.is_none_or(|t| now.saturating_sub(t) >= every)
}

#[cfg(test)]
mod skew_tests;
#[cfg(test)]
pub(crate) mod tests;
