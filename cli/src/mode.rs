//! How a backend answers, and when that changes: the one grammar for it, which the e2e harness's
//! fake backends (`upcheck_e2e::mode`) and `upcheck simulate`'s scenarios
//! (`scenario.rs`, with the `simulate` feature) both read.
//!
//! Each mode is one way a real app server behaves or breaks, taken from the incident and its
//! aftermath: a sidecar answering 502 to everything, an app server holding the port without
//! serving, a database blip that fails only the health probe (or one slow enough that the probe
//! never returns while pages still do), a crash-looping or misconfigured server that mangles the
//! bytes themselves. Modes are written as short specs (`status:502`, `blip:5s..25s`; a scenario's
//! `502`, `200 after 3s` and `overflow` too) so a scenario, the command line and the control
//! endpoint all say them the same way, and each reads back what it writes ([`Mode`]'s
//! `Display` and `FromStr`).

use std::fmt;
use std::str::FromStr;
use std::time::Duration;
use upcheck_policy::duration;

/// The path of the health probe, as in the operators' config and Rails' stock health controller.
pub const PROBE_PATH: &str = "/up";

/// One behaviour of a fake backend.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Mode {
    /// `ok`: 200 on every path.
    Ok,
    /// `status:N`: N on every path, the probe included (the incident's sidecar: 502 to everything).
    Status(u16),
    /// `hang`: accepts connections and reads requests, never answers.
    Hang,
    /// `noaccept`: keeps the port open but never accepts, so connections complete in the kernel's
    /// backlog and then wait (the incident's app server). Requests on connections accepted earlier hang.
    NoAccept,
    /// `refuse`: closes the port and every open connection, as a crashed process does; connections
    /// are refused. Leaving this mode listens again on the same port.
    Refuse,
    /// `blip:FROM..TO`: the probe answers 503 from FROM to TO after start, pages stay 200 (a
    /// shared-database blip seen only by a `/up` that queries the database).
    Blip {
        /// Start of the window, measured from the backend's start.
        from: Duration,
        /// End of the window (exclusive), measured from the backend's start.
        to: Duration,
    },
    /// `flap:PERIOD` (`flap` alone: 1 s): every path answers 200 for PERIOD, then 503 for PERIOD, and so on.
    Flap(Duration),
    /// `slow:DURATION`: 200 on every path, after DURATION.
    Slow(Duration),
    /// `N after DURATION` (a bare `N` is `status:N`): N on every path, the probe included, after
    /// DURATION.
    Late {
        /// The status.
        status: u16,
        /// How long before it is sent.
        after: Duration,
    },
    /// `overflow`: the proxy's circuit breaker for this backend is full, so the proxy answers 503
    /// itself without reaching it (what `upcheck simulate` runs). A fake backend answers 503 at
    /// once, the status that overflow gives.
    Overflow,
    /// `pages:N`: the probe passes (200), every other path answers N: a backend that booted but
    /// whose pages fail (its database unreachable), which only real traffic can see.
    Pages(u16),
    /// `trickle:PERIOD`: 200 on every path, but every response, status line included, goes out
    /// one byte per PERIOD on every connection, the open ones too (a slowloris upstream: the
    /// server is up, the bytes barely move).
    Trickle(Duration),
    /// `garbage`: every response, on every connection, is replaced by bytes that are not HTTP
    /// (no status line), as a server speaking another protocol on the port would send.
    Garbage,
    /// `lag:DURATION`: the probe passes at once, every other path answers 200 after DURATION: a
    /// backend whose pages wait on something slow (its database) while its `/up` does not.
    Lag(Duration),
    /// `stuckprobe`: the probe never answers, every other path answers 200 at once: a `/up` that
    /// waits on a shared dependency gone slow (its database) while pages are still served.
    StuckProbe,
    /// `bug:PERCENT%:N`: the probe passes, and that share of pages answers N, spread evenly over
    /// the pages in the order they arrive (at 20 %, every fifth): an app bug behind one URL, the
    /// same on every backend running the app.
    Bug {
        /// The share of pages that fail, 1 to 100.
        percent: u8,
        /// What they answer.
        status: u16,
    },
    /// `drain`, `drain:pages`, `drain:N`: an app server told to stop, still serving while it
    /// finishes (200), that says so as its [`DrainSignal`] has it.
    Drain(DrainSignal),
}

/// How an app server that drains says so.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DrainSignal {
    /// `drain`: every answer, the probe's and the pages', carries `x-envoy-immediate-health-check-fail`.
    Header,
    /// `drain:pages`: the pages' answers carry it, the probe's does not.
    PagesHeader,
    /// `drain:N`: the probe answers N (the configuration's `drain_status`, HAProxy's 404), the
    /// pages 200 without a header.
    ProbeStatus(u16),
}

/// How a backend in some mode answers one request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answer {
    /// Send this status after this delay.
    Respond {
        /// The response status.
        status: u16,
        /// How long to wait before sending it.
        after: Duration,
    },
    /// Never send anything; the client gives up or the connection closes.
    Never,
}

impl Mode {
    /// How this mode answers a request for `path`, `elapsed` after the backend started; `page` is
    /// the request's number among the backend's user requests, from 1 (0 for a probe).
    pub fn answer(&self, path: &str, elapsed: Duration, page: u64) -> Answer {
        let now = |status| Answer::Respond {
            status,
            after: Duration::ZERO,
        };
        match *self {
            Mode::Ok => now(200),
            Mode::Status(status) => now(status),
            Mode::Hang | Mode::NoAccept | Mode::Refuse => Answer::Never,
            Mode::Blip { from, to } if path == PROBE_PATH && (from..to).contains(&elapsed) => {
                now(503)
            }
            Mode::Blip { .. } => now(200),
            Mode::Flap(period) if (elapsed.as_nanos() / period.as_nanos().max(1)) % 2 == 1 => {
                now(503)
            }
            Mode::Flap(_) => now(200),
            Mode::Slow(after) => Answer::Respond { status: 200, after },
            Mode::Late { status, after } => Answer::Respond { status, after },
            Mode::Overflow => now(503),
            Mode::Pages(_) if path == PROBE_PATH => now(200),
            Mode::Pages(status) => now(status),
            // The damage is done on the wire (see `crate::wire`), below the status.
            Mode::Trickle(_) | Mode::Garbage => now(200),
            Mode::Lag(_) | Mode::Bug { .. } if path == PROBE_PATH => now(200),
            Mode::Lag(after) => Answer::Respond { status: 200, after },
            // Page n fails when n × percent / 100 reaches a new whole number.
            Mode::Bug { percent, status }
                if page * u64::from(percent) / 100
                    > page.saturating_sub(1) * u64::from(percent) / 100 =>
            {
                now(status)
            }
            Mode::Bug { .. } => now(200),
            Mode::StuckProbe if path == PROBE_PATH => Answer::Never,
            Mode::StuckProbe => now(200),
            Mode::Drain(DrainSignal::ProbeStatus(status)) if path == PROBE_PATH => now(status),
            Mode::Drain(_) => now(200),
        }
    }

    /// Whether this mode's answer to `path` carries the drain signal header
    /// (`upcheck_policy::drain::SIGNAL_HEADER`).
    pub fn signals_drain(&self, path: &str) -> bool {
        match self {
            Mode::Drain(DrainSignal::Header) => true,
            Mode::Drain(DrainSignal::PagesHeader) => path != PROBE_PATH,
            _ => false,
        }
    }
}

/// A mode spec that could not be read; its message names the spec and the accepted forms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModeError(String);

impl fmt::Display for ModeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ModeError {}

fn duration(spec: &str, text: &str) -> Result<Duration, ModeError> {
    duration::parse(text)
        .map_err(|e| ModeError(format!("{spec:?}: {text:?} is not a duration ({e})")))
}

fn status(spec: &str, code: &str) -> Result<u16, ModeError> {
    match code.trim().parse() {
        Ok(status @ 100..=999) => Ok(status),
        _ => Err(ModeError(format!(
            "{spec:?}: {code:?} is not an HTTP status"
        ))),
    }
}

fn percent(spec: &str, share: &str) -> Result<u8, ModeError> {
    match share.trim().strip_suffix('%').map(|n| n.trim().parse()) {
        Some(Ok(percent @ 1..=100)) => Ok(percent),
        _ => Err(ModeError(format!(
            "{spec:?}: {share:?} is not a share from 1% to 100%"
        ))),
    }
}

impl FromStr for Mode {
    type Err = ModeError;

    fn from_str(spec: &str) -> Result<Self, Self::Err> {
        let digits = |word: &str| !word.is_empty() && word.chars().all(|c| c.is_ascii_digit());
        match spec.split_whitespace().collect::<Vec<_>>().as_slice() {
            [code] if digits(code) => return Ok(Mode::Status(status(spec, code)?)),
            [code, "after", delay] if digits(code) => {
                return Ok(Mode::Late {
                    status: status(spec, code)?,
                    after: duration(spec, delay)?,
                })
            }
            _ => {}
        }
        let (kind, arg) = match spec.split_once(':') {
            Some((kind, arg)) => (kind, Some(arg)),
            None => (spec, None),
        };
        match (kind.trim(), arg) {
            ("ok", None) => Ok(Mode::Ok),
            ("hang", None) => Ok(Mode::Hang),
            ("noaccept", None) => Ok(Mode::NoAccept),
            ("refuse", None) => Ok(Mode::Refuse),
            ("flap", None) => Ok(Mode::Flap(Duration::from_secs(1))),
            ("flap", Some(period)) => Ok(Mode::Flap(duration(spec, period)?)),
            ("slow", Some(delay)) => Ok(Mode::Slow(duration(spec, delay)?)),
            ("trickle", Some(period)) => Ok(Mode::Trickle(duration(spec, period)?)),
            ("garbage", None) => Ok(Mode::Garbage),
            ("overflow", None) => Ok(Mode::Overflow),
            ("stuckprobe", None) => Ok(Mode::StuckProbe),
            ("status", Some(code)) => Ok(Mode::Status(status(spec, code)?)),
            ("pages", Some(code)) => Ok(Mode::Pages(status(spec, code)?)),
            ("lag", Some(delay)) => Ok(Mode::Lag(duration(spec, delay)?)),
            ("drain", None) => Ok(Mode::Drain(DrainSignal::Header)),
            ("drain", Some("pages")) => Ok(Mode::Drain(DrainSignal::PagesHeader)),
            ("drain", Some(code)) => Ok(Mode::Drain(DrainSignal::ProbeStatus(status(spec, code)?))),
            ("bug", Some(arg)) => {
                let (share, code) = arg.split_once(':').ok_or_else(|| {
                    ModeError(format!(
                        "{spec:?}: a bug is written bug:PERCENT%:STATUS, e.g. bug:20%:500"
                    ))
                })?;
                Ok(Mode::Bug {
                    percent: percent(spec, share)?,
                    status: status(spec, code)?,
                })
            }
            ("blip", Some(window)) => {
                let (from, to) = window.split_once("..").ok_or_else(|| {
                    ModeError(format!(
                        "{spec:?}: the window is written FROM..TO, e.g. blip:5s..25s"
                    ))
                })?;
                Ok(Mode::Blip {
                    from: duration(spec, from)?,
                    to: duration(spec, to)?,
                })
            }
            _ => Err(ModeError(format!(
                "unknown mode {spec:?}: expected ok, status:N (or N), hang, noaccept, refuse, \
                 blip:FROM..TO, flap[:PERIOD], slow:DURATION, N after DURATION, pages:N, \
                 trickle:PERIOD, garbage, lag:DURATION, bug:PERCENT%:N, stuckprobe, overflow, \
                 drain, drain:pages or drain:N"
            ))),
        }
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let d = duration::exact;
        match self {
            Mode::Ok => write!(f, "ok"),
            Mode::Status(status) => write!(f, "status:{status}"),
            Mode::Hang => write!(f, "hang"),
            Mode::NoAccept => write!(f, "noaccept"),
            Mode::Refuse => write!(f, "refuse"),
            Mode::Blip { from, to } => write!(f, "blip:{}..{}", d(*from), d(*to)),
            Mode::Flap(period) => write!(f, "flap:{}", d(*period)),
            Mode::Slow(delay) => write!(f, "slow:{}", d(*delay)),
            Mode::Late { status, after } => write!(f, "{status} after {}", d(*after)),
            Mode::Overflow => write!(f, "overflow"),
            Mode::Pages(status) => write!(f, "pages:{status}"),
            Mode::Trickle(period) => write!(f, "trickle:{}", d(*period)),
            Mode::Garbage => write!(f, "garbage"),
            Mode::Lag(delay) => write!(f, "lag:{}", d(*delay)),
            Mode::Bug { percent, status } => write!(f, "bug:{percent}%:{status}"),
            Mode::StuckProbe => write!(f, "stuckprobe"),
            Mode::Drain(DrainSignal::Header) => write!(f, "drain"),
            Mode::Drain(DrainSignal::PagesHeader) => write!(f, "drain:pages"),
            Mode::Drain(DrainSignal::ProbeStatus(status)) => write!(f, "drain:{status}"),
        }
    }
}

/// A change of mode at a fixed time after the backend started: `5s=status:502`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Switch {
    /// When the new mode starts, measured from the backend's start.
    pub at: Duration,
    /// The mode from then on.
    pub mode: Mode,
}

impl FromStr for Switch {
    type Err = ModeError;

    fn from_str(spec: &str) -> Result<Self, Self::Err> {
        let (at, mode) = spec.split_once('=').ok_or_else(|| {
            ModeError(format!(
                "{spec:?}: a switch is written TIME=MODE, e.g. 5s=status:502"
            ))
        })?;
        Ok(Switch {
            at: duration(spec, at)?,
            mode: mode.parse()?,
        })
    }
}

/// A backend's mode over time: the first mode, then timed switches.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Schedule {
    /// The mode from the start.
    pub first: Mode,
    /// Later changes, applied at their times whatever their order here.
    pub switches: Vec<Switch>,
}

impl Schedule {
    /// Adds a switch to `mode` at `at` after start.
    pub fn then(mut self, at: Duration, mode: Mode) -> Self {
        self.switches.push(Switch { at, mode });
        self
    }
}

impl From<Mode> for Schedule {
    fn from(first: Mode) -> Self {
        Schedule {
            first,
            switches: Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Any mode, with durations in whole milliseconds up to an hour.
    fn any_mode() -> impl Strategy<Value = Mode> {
        let d = || (0u64..3_600_000).prop_map(Duration::from_millis);
        let code = || 100u16..=999;
        prop_oneof![
            Just(Mode::Ok),
            code().prop_map(Mode::Status),
            Just(Mode::Hang),
            Just(Mode::NoAccept),
            Just(Mode::Refuse),
            (d(), d()).prop_map(|(from, to)| Mode::Blip { from, to }),
            d().prop_map(Mode::Flap),
            d().prop_map(Mode::Slow),
            (code(), d()).prop_map(|(status, after)| Mode::Late { status, after }),
            Just(Mode::Overflow),
            code().prop_map(Mode::Pages),
            d().prop_map(Mode::Trickle),
            Just(Mode::Garbage),
            d().prop_map(Mode::Lag),
            Just(Mode::StuckProbe),
            (1u8..=100, code()).prop_map(|(percent, status)| Mode::Bug { percent, status }),
            Just(Mode::Drain(DrainSignal::Header)),
            Just(Mode::Drain(DrainSignal::PagesHeader)),
            code().prop_map(|status| Mode::Drain(DrainSignal::ProbeStatus(status))),
        ]
    }

    proptest! {
        #[test]
        fn every_mode_reads_back_as_itself(mode in any_mode()) {
            prop_assert_eq!(mode.to_string().parse::<Mode>(), Ok(mode));
        }
    }

    #[test]
    fn a_scenarios_answers_read_as_modes() {
        assert_eq!("502".parse(), Ok(Mode::Status(502)));
        assert_eq!(
            " 200  after 3s ".parse(),
            Ok(Mode::Late {
                status: 200,
                after: Duration::from_secs(3)
            })
        );
        assert_eq!("overflow".parse(), Ok(Mode::Overflow));
        assert!("200 later 3s".parse::<Mode>().is_err());
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn every_mode_reads_back_what_it_writes() {
        for spec in [
            "ok",
            "status:502",
            "hang",
            "noaccept",
            "refuse",
            "blip:5s..25s",
            "flap:500ms",
            "slow:2s",
            "pages:500",
            "trickle:1s",
            "garbage",
            "lag:150ms",
            "bug:20%:500",
            "stuckprobe",
            "502 after 3s",
            "overflow",
            "drain",
            "drain:pages",
            "drain:404",
        ] {
            assert_eq!(spec.parse::<Mode>().unwrap().to_string(), spec);
        }
    }

    #[test]
    fn a_bad_spec_names_itself_and_the_accepted_forms() {
        let err = "stauts:502".parse::<Mode>().unwrap_err().to_string();
        assert!(
            err.contains("stauts:502") && err.contains("status:N"),
            "{err}"
        );
        let err = "status:abc".parse::<Mode>().unwrap_err().to_string();
        assert!(err.contains("not an HTTP status"), "{err}");
        let err = "blip:5s".parse::<Mode>().unwrap_err().to_string();
        assert!(err.contains("FROM..TO"), "{err}");
    }

    #[test]
    fn a_blip_fails_only_the_probe_and_only_inside_its_window() {
        let blip: Mode = "blip:1s..2s".parse().unwrap();
        let status = |path, at| match blip.answer(path, ms(at), 1) {
            Answer::Respond { status, .. } => status,
            Answer::Never => 0,
        };
        assert_eq!(status("/up", 999), 200);
        assert_eq!(status("/up", 1000), 503);
        assert_eq!(status("/up", 1999), 503);
        assert_eq!(status("/up", 2000), 200);
        assert_eq!(status("/", 1500), 200);
    }

    #[test]
    fn a_draining_backend_serves_and_says_so_as_its_signal_has_it() {
        let answer = |mode: &str, path| {
            let mode: Mode = mode.parse().unwrap();
            let status = match mode.answer(path, ms(0), 1) {
                Answer::Respond { status, .. } => status,
                Answer::Never => 0,
            };
            (status, mode.signals_drain(path))
        };
        assert_eq!(answer("drain", "/up"), (200, true));
        assert_eq!(answer("drain", "/"), (200, true));
        assert_eq!(answer("drain:pages", "/up"), (200, false));
        assert_eq!(answer("drain:pages", "/"), (200, true));
        assert_eq!(answer("drain:404", "/up"), (404, false));
        assert_eq!(answer("drain:404", "/"), (200, false));
        assert!(!Mode::Ok.signals_drain("/"));
        let err = "drain:soon".parse::<Mode>().unwrap_err().to_string();
        assert!(err.contains("not an HTTP status"), "{err}");
    }

    #[test]
    fn a_pages_backend_passes_its_probe_and_fails_everything_else() {
        let pages = Mode::Pages(502);
        let status = |path| match pages.answer(path, ms(0), 1) {
            Answer::Respond { status, .. } => status,
            Answer::Never => 0,
        };
        assert_eq!(status("/up"), 200);
        assert_eq!(status("/"), 502);
        assert_eq!(status("/orders/1"), 502);
        let err = "pages:abc".parse::<Mode>().unwrap_err().to_string();
        assert!(err.contains("not an HTTP status"), "{err}");
    }

    #[test]
    fn a_flap_alternates_every_period() {
        let flap = Mode::Flap(ms(100));
        let statuses: Vec<_> = [0, 99, 100, 199, 200]
            .map(|at| flap.answer("/", ms(at), 1))
            .into_iter()
            .map(|answer| match answer {
                Answer::Respond { status, .. } => status,
                Answer::Never => 0,
            })
            .collect();
        assert_eq!(statuses, [200, 200, 503, 503, 200]);
    }

    #[test]
    fn a_bug_fails_its_share_of_pages_evenly_and_never_the_probe() {
        let bug: Mode = "bug:20%:500".parse().unwrap();
        let failing: Vec<u64> = (1..=20)
            .filter(|&page| {
                bug.answer("/orders", ms(0), page)
                    != Answer::Respond {
                        status: 200,
                        after: ms(0),
                    }
            })
            .collect();
        assert_eq!(failing, [5, 10, 15, 20]);
        assert_eq!(
            bug.answer(PROBE_PATH, ms(0), 0),
            Answer::Respond {
                status: 200,
                after: ms(0)
            }
        );
        let err = "bug:20:500".parse::<Mode>().unwrap_err().to_string();
        assert!(err.contains("not a share"), "{err}");
        let err = "bug:20%".parse::<Mode>().unwrap_err().to_string();
        assert!(err.contains("bug:PERCENT%:STATUS"), "{err}");
    }

    #[test]
    fn a_lag_delays_every_page_but_not_the_probe() {
        let lag = Mode::Lag(ms(150));
        assert_eq!(
            lag.answer("/", ms(0), 1),
            Answer::Respond {
                status: 200,
                after: ms(150)
            }
        );
        assert_eq!(
            lag.answer(PROBE_PATH, ms(0), 0),
            Answer::Respond {
                status: 200,
                after: ms(0)
            }
        );
    }

    #[test]
    fn a_stuck_probe_never_answers_while_every_page_does() {
        let stuck = Mode::StuckProbe;
        assert_eq!(stuck.answer(PROBE_PATH, ms(0), 0), Answer::Never);
        assert_eq!(
            stuck.answer("/orders/1", ms(0), 1),
            Answer::Respond {
                status: 200,
                after: ms(0)
            }
        );
    }

    #[test]
    fn a_switch_reads_as_time_then_mode() {
        let switch: Switch = "5s=status:502".parse().unwrap();
        assert_eq!(
            switch,
            Switch {
                at: ms(5000),
                mode: Mode::Status(502)
            }
        );
    }
}
