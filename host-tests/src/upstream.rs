//! Scripted upstreams: one per Envoy cluster, answering probes and user requests per path, with a
//! behaviour that can change at given virtual times (a timeline), and counting what they were sent.
//!
//! Only registered upstreams exist as clusters: an http call or a route to any other name fails
//! the way Envoy fails it.

use std::collections::BTreeMap;
use std::time::Duration;

/// How an upstream treats a request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Behaviour {
    /// Answers `status` with `body` after `delay` (a timeout wins if it is shorter).
    Answer {
        /// HTTP status of the answer.
        status: u16,
        /// Body of the answer.
        body: String,
        /// Time from the request to the answer.
        delay: Duration,
        /// Headers the backend adds to its answer (as lowercase name, value).
        headers: Vec<(String, String)>,
    },
    /// Accepts the connection and never answers (a booting app server holding the port).
    Hang,
    /// Refuses the connection (nothing listens on the port).
    Refuse,
    /// Never reached: the proxy's circuit breaker for the upstream is full, and the proxy
    /// answers 503 itself.
    Overflow,
}

impl Behaviour {
    /// Answers `status` with an empty body after 1 ms.
    pub fn status(status: u16) -> Behaviour {
        Behaviour::Answer {
            status,
            body: String::new(),
            delay: Duration::from_millis(1),
            headers: Vec::new(),
        }
    }

    /// The same answer, after `delay` instead. No effect on `Hang`, `Refuse` and `Overflow`.
    pub fn after(self, delay: Duration) -> Behaviour {
        match self {
            Behaviour::Answer {
                status,
                body,
                headers,
                ..
            } => Behaviour::Answer {
                status,
                body,
                delay,
                headers,
            },
            other => other,
        }
    }

    /// The same answer, with `body`. No effect on `Hang`, `Refuse` and `Overflow`.
    pub fn body(self, body: &str) -> Behaviour {
        match self {
            Behaviour::Answer {
                status,
                delay,
                headers,
                ..
            } => Behaviour::Answer {
                status,
                body: body.to_string(),
                delay,
                headers,
            },
            other => other,
        }
    }

    /// The same answer, with header `name: value` added (`name` in lowercase). No effect on
    /// `Hang`, `Refuse` and `Overflow`.
    pub fn header(self, name: &str, value: &str) -> Behaviour {
        match self {
            Behaviour::Answer {
                status,
                body,
                delay,
                mut headers,
            } => {
                headers.push((name.to_string(), value.to_string()));
                Behaviour::Answer {
                    status,
                    body,
                    delay,
                    headers,
                }
            }
            other => other,
        }
    }
}

/// A behaviour that changes at given times since the host started.
#[derive(Clone, Debug)]
struct Timeline {
    changes: Vec<(Duration, Behaviour)>,
}

impl Timeline {
    fn new(behaviour: Behaviour) -> Timeline {
        Timeline {
            changes: vec![(Duration::ZERO, behaviour)],
        }
    }

    fn at(&self, now: Duration) -> &Behaviour {
        self.changes
            .iter()
            .rev()
            .find(|(from, _)| *from <= now)
            .map_or(&self.changes[0].1, |(_, behaviour)| behaviour)
    }

    fn from(&mut self, at: Duration, behaviour: Behaviour) {
        let index = self.changes.partition_point(|(from, _)| *from <= at);
        self.changes.insert(index, (at, behaviour));
    }
}

/// What an upstream was sent, by path (query strings stripped). Refused connections count too:
/// these are the requests addressed to the upstream.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// Http calls (probes) dispatched to the cluster.
    pub probes: BTreeMap<String, u64>,
    /// User requests routed to the cluster.
    pub requests: BTreeMap<String, u64>,
}

/// Which kind of traffic reached an upstream.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Sender {
    Probe,
    User,
}

/// One scripted cluster.
#[derive(Debug)]
pub(crate) struct Upstream {
    /// `127.0.0.1:<port>`, as `upstream.address` reports it.
    pub address: String,
    paths: BTreeMap<String, Timeline>,
    others: Timeline,
    /// A share (percent) of user requests that get a behaviour of their own, whatever the path.
    sometimes: Option<(u64, Behaviour)>,
    /// The pseudo-random sequence that picks them: the same requests every run.
    dice: u64,
    /// At most this many requests (probes included) a second are served as scripted; the rest
    /// get the behaviour given (an app server out of capacity).
    capacity: Option<(u32, Behaviour)>,
    /// The virtual second being counted against the capacity, and its requests so far.
    this_second: (u64, u32),
    pub counts: Counts,
}

impl Upstream {
    pub(crate) fn new(port: u16) -> Upstream {
        Upstream {
            address: format!("127.0.0.1:{port}"),
            paths: BTreeMap::new(),
            others: Timeline::new(Behaviour::status(200)),
            sometimes: None,
            dice: u64::from(port),
            capacity: None,
            this_second: (0, 0),
            counts: Counts::default(),
        }
    }

    /// Counts a request for `path` and says how the upstream treats it at `now`.
    pub(crate) fn receive(&mut self, sender: Sender, path: &str, now: Duration) -> Behaviour {
        let path = path.split('?').next().unwrap_or_default();
        let counts = match sender {
            Sender::Probe => &mut self.counts.probes,
            Sender::User => &mut self.counts.requests,
        };
        *counts.entry(path.to_string()).or_default() += 1;
        if let Some((per_second, overflow)) = &self.capacity {
            let second = now.as_secs();
            if self.this_second.0 != second {
                self.this_second = (second, 0);
            }
            self.this_second.1 += 1;
            if self.this_second.1 > *per_second {
                return overflow.clone();
            }
        }
        if let (Sender::User, Some((percent, behaviour))) = (sender, self.sometimes.clone()) {
            if self.roll() % 100 < percent {
                return behaviour;
            }
        }
        self.paths.get(path).unwrap_or(&self.others).at(now).clone()
    }

    /// The next number of the upstream's sequence (splitmix64).
    fn roll(&mut self) -> u64 {
        self.dice = self.dice.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.dice;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

/// Scripts one upstream: `host.upstream("app2").path("/up", Behaviour::status(200)).from(t, Behaviour::Hang)`.
///
/// `path` and `others` start a timeline (from time zero); `from` adds a change at a time since the
/// host started to the timeline started last.
pub struct Script<'a> {
    upstream: std::cell::RefMut<'a, Upstream>,
    current: Option<String>,
}

impl<'a> Script<'a> {
    pub(crate) fn new(upstream: std::cell::RefMut<'a, Upstream>) -> Script<'a> {
        Script {
            upstream,
            current: None,
        }
    }

    /// Requests for exactly `path` (query ignored) get `behaviour`.
    pub fn path(mut self, path: &str, behaviour: Behaviour) -> Self {
        self.upstream
            .paths
            .insert(path.to_string(), Timeline::new(behaviour));
        self.current = Some(path.to_string());
        self
    }

    /// Requests for every path without its own script get `behaviour` (default: 200 after 1 ms).
    pub fn others(mut self, behaviour: Behaviour) -> Self {
        self.upstream.others = Timeline::new(behaviour);
        self.current = None;
        self
    }

    /// From `at` (time since the host started), the timeline started last switches to `behaviour`.
    pub fn from(mut self, at: Duration, behaviour: Behaviour) -> Self {
        let upstream = &mut *self.upstream;
        let timeline = match &self.current {
            Some(path) => upstream.paths.get_mut(path),
            None => None,
        }
        .unwrap_or(&mut upstream.others);
        timeline.from(at, behaviour);
        self
    }

    /// `percent` of user requests (probes never), picked pseudo-randomly but the same every run,
    /// get `behaviour` instead of their path's, from the start.
    pub fn sometimes(mut self, percent: u64, behaviour: Behaviour) -> Self {
        self.upstream.sometimes = Some((percent, behaviour));
        self
    }

    /// Beyond `per_second` requests in a second of virtual time (probes and users alike, as
    /// they share the app server's queue), requests get `overflow` instead.
    pub fn capacity(mut self, per_second: u32, overflow: Behaviour) -> Self {
        self.upstream.capacity = Some((per_second, overflow));
        self
    }

    /// Every path gets `behaviour`, from `at` on (an upstream going down or coming back as a whole).
    pub fn all_from(mut self, at: Duration, behaviour: Behaviour) -> Self {
        let upstream = &mut *self.upstream;
        for timeline in upstream.paths.values_mut() {
            timeline.from(at, behaviour.clone());
        }
        upstream.others.from(at, behaviour);
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_timeline_switches_at_the_given_time_and_not_before() {
        let mut timeline = Timeline::new(Behaviour::status(200));
        timeline.from(Duration::from_secs(10), Behaviour::Hang);
        assert_eq!(
            timeline.at(Duration::from_millis(9_999)),
            &Behaviour::status(200)
        );
        assert_eq!(timeline.at(Duration::from_secs(10)), &Behaviour::Hang);
    }
}
