//! The virtual clock and its agenda.
//!
//! Nothing in the host sleeps: every tick, probe answer, timeout and request is an entry on the
//! agenda at a virtual instant, and `Host::advance` delivers them in time order (entries due at
//! the same instant in the order they were scheduled). Runs are therefore exactly repeatable, and
//! a test can cover minutes of traffic in milliseconds.

use crate::envoy::Reply;
use crate::grpc::Arrival;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::Duration;

/// The wall-clock time the guests see at `Host` start: 2023-11-14T22:13:20Z, in nanoseconds.
pub const EPOCH_NANOS: u64 = 1_700_000_000_000_000_000;

/// Something that falls due at a virtual instant.
#[derive(Debug)]
pub(crate) enum Event {
    /// The tick timer of a VM fires.
    Tick { vm: usize },
    /// A VM compiling at start is up ([`crate::HostOptions::compile`]).
    VmUp { vm: usize },
    /// An http call (probe) is answered or times out.
    CallResponse {
        vm: usize,
        context: u32,
        token: u32,
        reply: Reply,
    },
    /// Something arrived on a gRPC stream opened by `context` in `vm`.
    GrpcArrival {
        vm: usize,
        context: u32,
        token: u32,
        arrival: Arrival,
    },
    /// A unary gRPC call made by `context` in `vm` ends: its message, or its close.
    GrpcCallEnd {
        vm: usize,
        context: u32,
        token: u32,
        arrival: Arrival,
    },
    /// Something was enqueued on a shared queue registered by `context` in `vm`.
    QueueReady { vm: usize, context: u32, queue: u32 },
    /// A user request (record index) reaches the proxy.
    RequestArrives { record: usize },
    /// The routed upstream answers a user request, or Envoy gives up on it.
    UpstreamReply {
        vm: usize,
        context: u32,
        reply: Reply,
    },
    /// The client of a request disconnects.
    ClientGivesUp { vm: usize, context: u32 },
}

impl Event {
    /// The VM the event is delivered to, if it is one VM's.
    pub(crate) fn vm(&self) -> Option<usize> {
        match self {
            Event::Tick { vm }
            | Event::VmUp { vm }
            | Event::CallResponse { vm, .. }
            | Event::GrpcArrival { vm, .. }
            | Event::GrpcCallEnd { vm, .. }
            | Event::QueueReady { vm, .. }
            | Event::UpstreamReply { vm, .. }
            | Event::ClientGivesUp { vm, .. } => Some(*vm),
            Event::RequestArrives { .. } => None,
        }
    }
}

struct Entry {
    at: Duration,
    seq: u64,
    event: Event,
}

impl PartialEq for Entry {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}
impl Eq for Entry {}
impl PartialOrd for Entry {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Entry {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.at, self.seq).cmp(&(other.at, other.seq))
    }
}

/// Virtual time since the host started, and what is scheduled.
#[derive(Default)]
pub(crate) struct Clock {
    now: Duration,
    next_seq: u64,
    agenda: BinaryHeap<Reverse<Entry>>,
}

impl Clock {
    /// Time since the host started.
    pub(crate) fn now(&self) -> Duration {
        self.now
    }

    /// The wall-clock time guests see, in nanoseconds since the Unix epoch.
    pub(crate) fn wall_nanos(&self) -> u64 {
        EPOCH_NANOS.saturating_add(u64::try_from(self.now.as_nanos()).unwrap_or(u64::MAX))
    }

    /// Schedules `event` `after` from now.
    pub(crate) fn schedule(&mut self, after: Duration, event: Event) {
        let entry = Entry {
            at: self.now + after,
            seq: self.next_seq,
            event,
        };
        self.next_seq += 1;
        self.agenda.push(Reverse(entry));
    }

    /// When the next event falls due, if any is scheduled.
    pub(crate) fn next_due(&self) -> Option<Duration> {
        self.agenda.peek().map(|Reverse(entry)| entry.at)
    }

    /// Takes the next event if it is due by `deadline`, moving the clock to its instant.
    pub(crate) fn pop_due(&mut self, deadline: Duration) -> Option<Event> {
        if self.next_due()? > deadline {
            return None;
        }
        let Reverse(entry) = self.agenda.pop()?;
        self.now = self.now.max(entry.at);
        Some(entry.event)
    }

    /// Drops every scheduled event addressed to `vm`.
    pub(crate) fn forget_vm(&mut self, vm: usize) {
        self.agenda
            .retain(|Reverse(entry)| entry.event.vm() != Some(vm));
    }

    /// Moves the clock forward to `to` (never backwards).
    pub(crate) fn settle_at(&mut self, to: Duration) {
        self.now = self.now.max(to);
    }
}
