//! What the backends do over a stretch of simulated time: the input of `upcheck simulate`.
//!
//! A scenario is the incident told as data: which backends exist, when one joins the
//! configuration, how each answers its health check (`up`) and its pages (`pages`) and when that
//! changes, how many requests a second the users send and for how long. The built-in scenarios
//! are written in the same JSON an operator writes in a scenario file, and read by the same
//! reader, so every built-in is also an example of the format:
//!
//! ```json
//! {
//!   "about": "app2's pages answer 500 from 20 s on while its /up passes",
//!   "rate": 40,
//!   "duration": "60s",
//!   "backends": [
//!     {"name": "app1"},
//!     {"name": "app2", "changes": [{"at": "20s", "pages": "500"}, {"at": "40s", "up": "hang"}]}
//!   ]
//! }
//! ```
//!
//! Members: `about` (text, optional), `rate` (requests a second, 1 to [`MAX_RATE`], default 40),
//! `duration` (default `"60s"`, at most [`MAX_DURATION`]), `backends` (required, names unique).
//! A backend: `name` (required; a configuration's upstream of that name is this backend),
//! `added` (it joins the configuration at that time; default: from the start), `up` and `pages`
//! (how it answers at first, default `"200"`), `changes` (in time order, each with `at` and `up`,
//! `pages` or both). An answer is a status (`"502"`), a status after a delay (`"200 after 3s"`),
//! `"hang"` (holds the connection and never answers), `"refuse"` (nothing listens),
//! `"overflow"` (the proxy's circuit breaker for it is full: the proxy answers 503 itself) or
//! `"drain"` (200, with the drain signal header `x-envoy-immediate-health-check-fail`), read
//! as the e2e harness's fake backends read their modes ([`crate::mode`]). A configuration that
//! checks by gRPC (`health_checks.active.grpc`) reads `up` as the health service's answer:
//! `"SERVING"`, `"NOT_SERVING"`, `"SERVICE_UNKNOWN"` or a gRPC status by name (`"UNAVAILABLE"`)
//! ([`grpc`]).
//! Durations are Go's (`"20s"`, `"1m30s"`, `"500ms"`). Anything else is refused with the JSON path.

mod grpc;

pub use grpc::{is_grpc, serving_answer};

use std::collections::HashSet;
use std::time::Duration;

use serde::Deserialize;
use upcheck_host_tests::Behaviour;
use upcheck_policy::duration;
use upcheck_policy::ConfigError;

use crate::mode::{DrainSignal, Mode};
use crate::refuse;
use upcheck_policy::drain::SIGNAL_HEADER;

/// Requests a second a scenario may send at most.
pub const MAX_RATE: u32 = 1_000;
/// How long a scenario may last at most: one hour.
pub const MAX_DURATION: Duration = Duration::from_secs(3_600);
/// Backends a scenario may have at most.
pub const MAX_BACKENDS: usize = 64;

/// A scenario, read and checked.
#[derive(Debug, Clone, PartialEq)]
pub struct Scenario {
    /// What happens, in a sentence. Default empty.
    pub about: String,
    /// User requests a second, spread evenly. Default 40.
    pub rate: u32,
    /// How long users send requests. Default 60 s.
    pub duration: Duration,
    /// The backends, in order.
    pub backends: Vec<Backend>,
}

impl Scenario {
    /// Whether any backend's health check answers in gRPC's terms ([`is_grpc`]): the scenario is
    /// one of gRPC backends.
    pub fn grpc(&self) -> bool {
        self.backends
            .iter()
            .any(|b| is_grpc(&b.up) || b.changes.iter().any(|c| c.up.as_ref().is_some_and(is_grpc)))
    }
}

/// One backend and how it behaves over time.
#[derive(Debug, Clone, PartialEq)]
pub struct Backend {
    /// Its name: the configuration's upstream of that name.
    pub name: String,
    /// When it joins the configuration (a configuration update); `None`: from the start.
    pub added: Option<Duration>,
    /// How it answers its health check at first. Default 200.
    pub up: Behaviour,
    /// How it answers every other path (the users' pages) at first. Default 200.
    pub pages: Behaviour,
    /// Later changes, in time order.
    pub changes: Vec<Change>,
}

/// From `at` on, a backend answers differently.
#[derive(Debug, Clone, PartialEq)]
pub struct Change {
    /// Since the start of the scenario.
    pub at: Duration,
    /// The new answer to its health check, if it changes.
    pub up: Option<Behaviour>,
    /// The new answer to its pages, if it changes.
    pub pages: Option<Behaviour>,
}

/// The built-in scenarios, by name, as scenario files.
pub const BUILTIN: &[(&str, &str)] = &[
    (
        "incident",
        r#"{"about": "app2 is added to the configuration at 5 s while its sidecar answers 502 to everything",
            "backends": [{"name": "app1"},
                         {"name": "app2", "added": "5s", "up": "502", "pages": "502"}]}"#,
    ),
    (
        "hang",
        r#"{"about": "app2 stops answering anything at 20 s, holding its connections open",
            "backends": [{"name": "app1"},
                         {"name": "app2", "changes": [{"at": "20s", "up": "hang", "pages": "hang"}]}]}"#,
    ),
    (
        "db-blip",
        r#"{"about": "every /up answers 503 from 20 s to 40 s (a shared database blips) while pages work",
            "backends": [{"name": "app1", "changes": [{"at": "20s", "up": "503"}, {"at": "40s", "up": "200"}]},
                         {"name": "app2", "changes": [{"at": "20s", "up": "503"}, {"at": "40s", "up": "200"}]}]}"#,
    ),
    (
        "blip-after-down",
        r#"{"about": "app2 is down (nothing listens) from the start; app1's /up answers 503 from 30 s to 50 s",
            "duration": "70s",
            "backends": [{"name": "app1", "changes": [{"at": "30s", "up": "503"}, {"at": "50s", "up": "200"}]},
                         {"name": "app2", "up": "refuse", "pages": "refuse"}]}"#,
    ),
    (
        "pages-500",
        r#"{"about": "app2's pages answer 500 from 20 s on while its /up keeps passing",
            "backends": [{"name": "app1"},
                         {"name": "app2", "changes": [{"at": "20s", "pages": "500"}]}]}"#,
    ),
    (
        "deploy",
        r#"{"about": "a rolling deploy: each backend in turn drains (its answers carry the drain signal) for 5 s, exits (nothing listens) for 8 s, boots (holds connections unanswered) for 1 s, then serves again",
            "duration": "90s",
            "backends": [{"name": "app1", "changes": [{"at": "20s", "up": "drain", "pages": "drain"},
                                                      {"at": "25s", "up": "refuse", "pages": "refuse"},
                                                      {"at": "33s", "up": "hang", "pages": "hang"},
                                                      {"at": "34s", "up": "200", "pages": "200"}]},
                         {"name": "app2", "changes": [{"at": "55s", "up": "drain", "pages": "drain"},
                                                      {"at": "60s", "up": "refuse", "pages": "refuse"},
                                                      {"at": "68s", "up": "hang", "pages": "hang"},
                                                      {"at": "69s", "up": "200", "pages": "200"}]}]}"#,
    ),
    (
        "grpc-not-serving",
        r#"{"about": "two gRPC servers checked by the gRPC Health Checking Protocol: app2's health service answers NOT_SERVING from the start, app1's SERVING",
            "duration": "30s",
            "backends": [{"name": "app1", "up": "SERVING"},
                         {"name": "app2", "up": "NOT_SERVING"}]}"#,
    ),
    (
        "slow",
        r#"{"about": "app2 answers every request, /up included, after 3 s from 20 s on",
            "backends": [{"name": "app1"},
                         {"name": "app2", "changes": [{"at": "20s", "up": "200 after 3s", "pages": "200 after 3s"}]}]}"#,
    ),
];

/// The built-in scenario `name`.
pub fn builtin(name: &str) -> Result<Scenario, ConfigError> {
    let (_, text) = BUILTIN
        .iter()
        .find(|(known, _)| *known == name)
        .ok_or_else(|| {
            let names: Vec<&str> = BUILTIN.iter().map(|(name, _)| *name).collect();
            refuse(
                "",
                format!(
                    "no built-in scenario {name:?}; there are {}",
                    names.join(", ")
                ),
            )
        })?;
    read(text.as_bytes())
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ScenarioFile {
    #[serde(default)]
    about: String,
    #[serde(default = "default_rate")]
    rate: u32,
    #[serde(
        default = "default_duration",
        deserialize_with = "duration::deserialize"
    )]
    duration: Duration,
    backends: Vec<BackendFile>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct BackendFile {
    name: String,
    #[serde(default, deserialize_with = "some_duration")]
    added: Option<Duration>,
    #[serde(default = "ok", deserialize_with = "answer")]
    up: Behaviour,
    #[serde(default = "ok", deserialize_with = "answer")]
    pages: Behaviour,
    #[serde(default)]
    changes: Vec<ChangeFile>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ChangeFile {
    #[serde(deserialize_with = "duration::deserialize")]
    at: Duration,
    #[serde(default, deserialize_with = "some_answer")]
    up: Option<Behaviour>,
    #[serde(default, deserialize_with = "some_answer")]
    pages: Option<Behaviour>,
}

fn default_rate() -> u32 {
    40
}

fn default_duration() -> Duration {
    Duration::from_secs(60)
}

fn ok() -> Behaviour {
    Behaviour::status(200)
}

fn some_duration<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
    duration::deserialize(d).map(Some)
}

fn answer<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Behaviour, D::Error> {
    let text = String::deserialize(d)?;
    parse_answer(&text).map_err(serde::de::Error::custom)
}

fn some_answer<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Behaviour>, D::Error> {
    answer(d).map(Some)
}

/// Reads an answer: `"502"`, `"200 after 3s"`, `"hang"`, `"refuse"`, `"overflow"` or `"drain"`
/// (200, carrying the drain signal header), as the
/// [`Mode`] grammar reads them; the host runs those (and `ok`, `status:N` and `slow:DURATION`,
/// the same answers spelt the fake backends' way), with a status up to 599.
fn parse_answer(text: &str) -> Result<Behaviour, String> {
    if let Some(answer) = grpc::parse(text) {
        return Ok(answer);
    }
    let expected = "expected a status (\"502\"), a status after a delay (\"200 after 3s\"), \
                    \"hang\", \"refuse\", \"overflow\" or \"drain\"";
    let refused = || format!("{text:?}: {expected}");
    let status = |status: u16| match status {
        100..=599 => Ok(Behaviour::status(status)),
        _ => Err(refused()),
    };
    match text.parse::<Mode>() {
        Ok(Mode::Hang) => Ok(Behaviour::Hang),
        Ok(Mode::Refuse) => Ok(Behaviour::Refuse),
        Ok(Mode::Overflow) => Ok(Behaviour::Overflow),
        Ok(Mode::Drain(DrainSignal::Header)) => Ok(status(200)?.header(SIGNAL_HEADER, "true")),
        Ok(Mode::Ok) => status(200),
        Ok(Mode::Status(code)) => status(code),
        Ok(Mode::Slow(after)) => Ok(status(200)?.after(after)),
        Ok(Mode::Late {
            status: code,
            after,
        }) => Ok(status(code)?.after(after)),
        _ => Err(refused()),
    }
}

/// How an answer reads in a timeline: `502`, `200 after 3s`, `hang`, `refuse`, `overflow`,
/// `drain`.
pub fn describe(behaviour: &Behaviour) -> String {
    if let Some(grpc) = grpc::describe(behaviour) {
        return grpc;
    }
    match behaviour {
        Behaviour::Answer { headers, .. } if headers.iter().any(|(n, _)| n == SIGNAL_HEADER) => {
            "drain".to_string()
        }
        Behaviour::Answer { status, delay, .. } if *delay > Duration::from_millis(1) => {
            format!("{status} after {}", duration::exact(*delay))
        }
        Behaviour::Answer { status, .. } => status.to_string(),
        Behaviour::Hang => "hang".to_string(),
        Behaviour::Refuse => "refuse".to_string(),
        Behaviour::Overflow => "overflow".to_string(),
    }
}

/// Reads and checks a scenario file.
pub fn read(bytes: &[u8]) -> Result<Scenario, ConfigError> {
    let mut reader = serde_json::Deserializer::from_slice(bytes);
    let mut track = serde_path_to_error::Track::new();
    let file = ScenarioFile::deserialize(serde_path_to_error::Deserializer::new(
        &mut reader,
        &mut track,
    ))
    .and_then(|file| reader.end().map(|()| file))
    .map_err(|e| {
        refuse(
            track.path().to_string().trim_start_matches('.'),
            e.to_string(),
        )
    })?;
    checked(file)
}

/// What spans fields: limits, unique names, time order, someone there from the start.
fn checked(file: ScenarioFile) -> Result<Scenario, ConfigError> {
    if !(1..=MAX_RATE).contains(&file.rate) {
        return Err(refuse(
            "rate",
            format!("{} requests a second: expected 1 to {MAX_RATE}", file.rate),
        ));
    }
    if file.duration > MAX_DURATION {
        return Err(refuse(
            "duration",
            format!(
                "{}: a scenario lasts at most {}",
                duration::exact(file.duration),
                duration::exact(MAX_DURATION)
            ),
        ));
    }
    if file.backends.is_empty() || file.backends.len() > MAX_BACKENDS {
        return Err(refuse(
            "backends",
            format!("expected 1 to {MAX_BACKENDS} backends"),
        ));
    }
    let within = |path: String, at: Duration| {
        if at >= file.duration {
            Err(refuse(
                path,
                format!(
                    "{} is not within the scenario's duration ({})",
                    duration::exact(at),
                    duration::exact(file.duration)
                ),
            ))
        } else {
            Ok(())
        }
    };
    let mut names = HashSet::new();
    let mut backends = Vec::with_capacity(file.backends.len());
    for (i, backend) in file.backends.into_iter().enumerate() {
        if backend.name.trim().is_empty() {
            return Err(refuse(format!("backends[{i}].name"), "must not be empty"));
        }
        if !names.insert(backend.name.clone()) {
            return Err(refuse(
                format!("backends[{i}].name"),
                format!("{:?} is named twice", backend.name),
            ));
        }
        if let Some(added) = backend.added {
            within(format!("backends[{i}].added"), added)?;
        }
        let mut changes = Vec::with_capacity(backend.changes.len());
        for (j, change) in backend.changes.into_iter().enumerate() {
            let path = format!("backends[{i}].changes[{j}]");
            within(format!("{path}.at"), change.at)?;
            if change.up.is_none() && change.pages.is_none() {
                return Err(refuse(path, "a change needs \"up\", \"pages\" or both"));
            }
            if changes
                .last()
                .is_some_and(|last: &Change| last.at > change.at)
            {
                return Err(refuse(
                    format!("{path}.at"),
                    "changes are listed in time order: this one is earlier than the one before",
                ));
            }
            changes.push(Change {
                at: change.at,
                up: change.up,
                pages: change.pages,
            });
        }
        backends.push(Backend {
            name: backend.name,
            added: backend.added,
            up: backend.up,
            pages: backend.pages,
            changes,
        });
    }
    if backends.iter().all(|backend| backend.added.is_some()) {
        return Err(refuse(
            "backends",
            "every backend is \"added\" later: at least one must be there from the start",
        ));
    }
    Ok(Scenario {
        about: file.about,
        rate: file.rate,
        duration: file.duration,
        backends,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(text: &str) -> String {
        read(text.as_bytes()).expect_err("refused").to_string()
    }

    #[test]
    fn every_built_in_scenario_reads() {
        for (name, _) in BUILTIN {
            let scenario = builtin(name).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert!(!scenario.about.is_empty(), "{name} says what happens");
        }
    }

    #[test]
    fn an_answer_reads_as_status_delay_hang_or_refuse() {
        assert_eq!(parse_answer("502"), Ok(Behaviour::status(502)));
        assert_eq!(
            parse_answer("200 after 3s"),
            Ok(Behaviour::status(200).after(Duration::from_secs(3)))
        );
        assert_eq!(parse_answer("hang"), Ok(Behaviour::Hang));
        assert_eq!(parse_answer("refuse"), Ok(Behaviour::Refuse));
        assert!(parse_answer("700").is_err());
        assert!(parse_answer("200 later 3s").is_err());
    }

    #[test]
    fn an_answer_describes_itself_as_written() {
        for text in ["502", "200 after 3s", "hang", "refuse"] {
            let behaviour = parse_answer(text).expect("an answer");
            assert_eq!(describe(&behaviour), text);
        }
    }

    #[test]
    fn defaults_are_forty_requests_a_second_for_a_minute_answering_200() {
        let scenario = read(br#"{"backends": [{"name": "app1"}]}"#).expect("read");
        assert_eq!(scenario.rate, 40);
        assert_eq!(scenario.duration, Duration::from_secs(60));
        assert_eq!(scenario.backends[0].up, Behaviour::status(200));
        assert_eq!(scenario.backends[0].pages, Behaviour::status(200));
    }

    #[test]
    fn a_bad_answer_is_refused_with_its_path() {
        let message = refused(
            r#"{"backends": [{"name": "app1"}, {"name": "app2", "changes": [{"at": "20s", "pages": "five hundred"}]}]}"#,
        );
        assert!(
            message.starts_with("backends[1].changes[0].pages: \"five hundred\""),
            "{message}"
        );
    }

    #[test]
    fn an_unknown_member_is_refused_with_its_path() {
        let message = refused(r#"{"backends": [{"name": "app1", "down": "hang"}]}"#);
        assert!(message.starts_with("backends[0].down: "), "{message}");
    }

    #[test]
    fn a_change_after_the_end_is_refused() {
        let message = refused(
            r#"{"duration": "30s", "backends": [{"name": "app1", "changes": [{"at": "40s", "up": "503"}]}]}"#,
        );
        assert_eq!(
            message,
            "backends[0].changes[0].at: 40s is not within the scenario's duration (30s)"
        );
    }

    #[test]
    fn changes_out_of_time_order_are_refused() {
        let message = refused(
            r#"{"backends": [{"name": "app1", "changes": [{"at": "20s", "up": "503"}, {"at": "10s", "up": "200"}]}]}"#,
        );
        assert!(
            message.starts_with("backends[0].changes[1].at: "),
            "{message}"
        );
    }

    #[test]
    fn a_change_that_changes_nothing_is_refused() {
        let message = refused(r#"{"backends": [{"name": "app1", "changes": [{"at": "20s"}]}]}"#);
        assert!(message.starts_with("backends[0].changes[0]: "), "{message}");
    }

    #[test]
    fn a_name_given_twice_is_refused() {
        let message = refused(r#"{"backends": [{"name": "app1"}, {"name": "app1"}]}"#);
        assert_eq!(message, "backends[1].name: \"app1\" is named twice");
    }

    #[test]
    fn a_scenario_where_everyone_joins_later_is_refused() {
        let message = refused(r#"{"backends": [{"name": "app1", "added": "5s"}]}"#);
        assert!(message.starts_with("backends: "), "{message}");
    }

    #[test]
    fn a_rate_of_zero_is_refused() {
        let message = refused(r#"{"rate": 0, "backends": [{"name": "app1"}]}"#);
        assert!(message.starts_with("rate: "), "{message}");
    }
}
