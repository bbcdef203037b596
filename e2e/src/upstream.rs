//! A fake app server on 127.0.0.1 that behaves, and breaks, on command.
//!
//! Tests run it inside their own process (no port handed over between processes, counts read
//! directly); the `fake-upstream` binary runs the same server alone for manual experiments.
//! It counts what it receives, because the questions the scenarios ask are "did the probes go out
//! once per interval" and "did any user request reach the broken backend".
//!
//! It can also be given a capacity ([`FakeUpstream::set_capacity`]): beyond so many requests a
//! second it answers 503 at once, whatever its mode, as an app server with a fixed number of
//! workers does, so a scenario can show what piling the traffic onto fewer backends costs.
//!
//! Two paths are the server's own and never counted: `GET /__counts` answers the counts as JSON,
//! `PUT /__mode` with a mode spec as body changes the mode (and cancels the pending switches).
//! Neither answers while the server does not accept (`noaccept`, `refuse`), and both are trickled
//! or garbled like every answer in `trickle` and `garbage` (see [`crate::wire`]).

mod capacity;

use capacity::Capacity;

use std::convert::Infallible;
use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::mode::{Answer, Mode, Schedule, Switch, PROBE_PATH};
use crate::wire::Wire;
use upcheck_policy::drain::SIGNAL_HEADER;

/// The header Envoy routes on; a backend that receives it shows the route leaked it.
pub const ROUTING_HEADER: &str = "x-upcheck-upstream";

/// The response header that names the backend that answered.
pub const NAME_HEADER: &str = "x-fake-upstream";

/// What a fake backend has received so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// `GET /up` requests: health probes.
    pub probes: u64,
    /// Every other request: user traffic.
    pub requests: u64,
    /// Requests (of either kind) that still carried the routing header.
    pub with_routing_header: u64,
}

/// A running fake backend; dropping it closes its port and every connection.
pub struct FakeUpstream {
    addr: SocketAddr,
    shared: Arc<Shared>,
    shutdown: CancellationToken,
}

/// State shared by the accept loop, the connections and the handle.
struct Shared {
    name: String,
    started: Instant,
    mode: watch::Sender<Mode>,
    /// Cancelled when the mode is set by hand: the remaining timed switches no longer apply.
    schedule: CancellationToken,
    probes: AtomicU64,
    requests: AtomicU64,
    with_routing_header: AtomicU64,
    capacity: Mutex<Capacity>,
    turned_away: AtomicU64,
    /// A change the next probe makes as it arrives (see [`FakeUpstream::switch_at_probe`]).
    at_probe: Mutex<AtProbe>,
    /// When the first probe arrived.
    first_probe: OnceLock<Instant>,
}

/// A change of mode that waits for the next probe.
#[derive(Debug)]
enum AtProbe {
    /// None asked for.
    Idle,
    /// The next probe switches to this mode before it is answered.
    Pending(Mode),
    /// A probe made the change; the user requests received before it.
    Made(u64),
}

impl FakeUpstream {
    /// Starts a backend named `name` on a free port of 127.0.0.1.
    pub async fn start(name: &str, schedule: impl Into<Schedule>) -> io::Result<Self> {
        Self::bind(0, name, schedule).await
    }

    /// Starts a backend named `name` on 127.0.0.1:`port` (0: any free port).
    pub async fn bind(port: u16, name: &str, schedule: impl Into<Schedule>) -> io::Result<Self> {
        let schedule = schedule.into();
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, port)).await?;
        let addr = listener.local_addr()?;
        let shutdown = CancellationToken::new();
        let shared = Arc::new(Shared {
            name: name.to_owned(),
            started: Instant::now(),
            mode: watch::Sender::new(schedule.first),
            schedule: shutdown.child_token(),
            probes: AtomicU64::new(0),
            requests: AtomicU64::new(0),
            with_routing_header: AtomicU64::new(0),
            capacity: Mutex::new(Capacity::default()),
            turned_away: AtomicU64::new(0),
            at_probe: Mutex::new(AtProbe::Idle),
            first_probe: OnceLock::new(),
        });
        tokio::spawn(follow(schedule.switches, shared.clone()));
        tokio::spawn(accept_loop(
            listener,
            addr,
            shared.clone(),
            shutdown.clone(),
        ));
        Ok(FakeUpstream {
            addr,
            shared,
            shutdown,
        })
    }

    /// The address it listens on (also while refusing: it listens there again afterwards).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The name it answers with.
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// What it has received so far.
    pub fn counts(&self) -> Counts {
        self.shared.counts()
    }

    /// The probes each of `upstreams` received in `window` from its own first probe on, each
    /// read as its window ends: a count per interval that does not depend on when the proxy said
    /// it was ready, nor on what else the test awaited meanwhile. An error if one was not probed
    /// within `window`.
    pub async fn probes_from_first(
        upstreams: &[&FakeUpstream],
        window: Duration,
    ) -> anyhow::Result<Vec<u64>> {
        let deadline = Instant::now() + window;
        let mut firsts = Vec::new();
        for upstream in upstreams {
            let first = loop {
                if let Some(first) = upstream.shared.first_probe.get() {
                    break *first;
                }
                anyhow::ensure!(
                    Instant::now() < deadline,
                    "{} was never probed",
                    upstream.name()
                );
                tokio::time::sleep(Duration::from_millis(10)).await;
            };
            firsts.push(first);
        }
        // In the order the windows end, so that each is read at its own end.
        let mut order: Vec<usize> = (0..upstreams.len()).collect();
        order.sort_by_key(|&i| firsts[i]);
        let mut probes = vec![0; upstreams.len()];
        for i in order {
            tokio::time::sleep_until(firsts[i] + window).await;
            probes[i] = upstreams[i].counts().probes;
        }
        Ok(probes)
    }

    /// Changes the mode now; the pending timed switches are cancelled.
    pub fn set_mode(&self, mode: Mode) {
        self.shared.set_mode(mode);
    }

    /// Switches to `mode` as the next probe arrives, before answering it, so the probe is the
    /// first request to meet the change and users meet it right after, as when a backend breaks
    /// just before it is probed: the probe, not the passive checks, finds it first. Returns the
    /// user requests received before the switch; an error if no probe came `within`.
    pub async fn switch_at_probe(&self, mode: Mode, within: Duration) -> anyhow::Result<u64> {
        *self.shared.at_probe() = AtProbe::Pending(mode);
        let deadline = Instant::now() + within;
        loop {
            {
                let mut at_probe = self.shared.at_probe();
                if let AtProbe::Made(before) = *at_probe {
                    *at_probe = AtProbe::Idle;
                    return Ok(before);
                }
                if Instant::now() >= deadline {
                    *at_probe = AtProbe::Idle;
                    anyhow::bail!("{} was not probed", self.name());
                }
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }

    /// Serves `per_second` requests a second (probes and pages alike, as they wait in one app
    /// server's queue), a burst of up to that many at once, and answers the rest 503 at once,
    /// whatever the mode; `None` lifts the limit. No limit unless set.
    pub fn set_capacity(&self, per_second: Option<u32>) {
        *self.shared.capacity() = Capacity::new(per_second, self.shared.started.elapsed());
    }

    /// How many requests (probes included) were answered 503 for want of capacity so far.
    pub fn turned_away(&self) -> u64 {
        self.shared.turned_away.load(Ordering::Relaxed)
    }

    /// The current mode.
    pub fn mode(&self) -> Mode {
        self.shared.mode.borrow().clone()
    }

    /// Restarts without warning, as a deploy or a crash does: its port closed for `down`
    /// (`refuse`: connections refused, the open ones dropped), then booting for `boot`
    /// (`slow:<boot>`: it accepts, and answers only after `boot`), then serving (`ok`).
    pub async fn restart(&self, down: Duration, boot: Duration) {
        self.set_mode(Mode::Refuse);
        tokio::time::sleep(down).await;
        self.set_mode(Mode::Slow(boot));
        tokio::time::sleep(boot).await;
        self.set_mode(Mode::Ok);
    }

    /// Switches to `mode` just after the next probe has been answered (an error if none came
    /// `within`), so users meet the change a whole interval before the next probe does: the
    /// passive checks, not a lucky probe, must notice it. Returns the user requests received
    /// before the switch.
    pub async fn switch_after_probe(&self, mode: Mode, within: Duration) -> anyhow::Result<u64> {
        let seen = self.counts().probes;
        let deadline = Instant::now() + within;
        while self.counts().probes == seen {
            anyhow::ensure!(Instant::now() < deadline, "{} was not probed", self.name());
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        // Let the probe's answer leave first: `refuse` drops open connections, the probe's
        // included, and a failed probe would take the backend out before any user met the change.
        tokio::time::sleep(Duration::from_millis(50)).await;
        let before = self.counts().requests;
        self.set_mode(mode);
        Ok(before)
    }
}

impl Drop for FakeUpstream {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

impl Shared {
    fn counts(&self) -> Counts {
        Counts {
            probes: self.probes.load(Ordering::Relaxed),
            requests: self.requests.load(Ordering::Relaxed),
            with_routing_header: self.with_routing_header.load(Ordering::Relaxed),
        }
    }

    fn set_mode(&self, mode: Mode) {
        self.schedule.cancel();
        self.mode.send_replace(mode);
    }

    fn capacity(&self) -> std::sync::MutexGuard<'_, Capacity> {
        // The counts stay meaningful even if a holder panicked: take them as they are.
        self.capacity
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn at_probe(&self) -> std::sync::MutexGuard<'_, AtProbe> {
        self.at_probe
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Makes the change the next probe was awaited for, if one was: called as a probe arrives.
    fn probe_arrived(&self) {
        self.first_probe.get_or_init(Instant::now);
        let mut at_probe = self.at_probe();
        let made = AtProbe::Made(self.requests.load(Ordering::Relaxed));
        match std::mem::replace(&mut *at_probe, made) {
            AtProbe::Pending(mode) => self.set_mode(mode),
            other => *at_probe = other,
        }
    }
}

/// Applies the timed switches, in time order, until the mode is set by hand.
async fn follow(mut switches: Vec<Switch>, shared: Arc<Shared>) {
    switches.sort_by_key(|switch| switch.at);
    for switch in switches {
        tokio::select! {
            _ = shared.schedule.cancelled() => return,
            _ = tokio::time::sleep_until(shared.started + switch.at) => {
                shared.mode.send_replace(switch.mode);
            }
        }
    }
}

/// Accepts connections while the mode allows it. While refusing it stops listening but keeps
/// the port bound ([`hold`]): a connection is refused as by a port nothing listens on, and no
/// other test's backend can take the port meanwhile and answer in its place.
async fn accept_loop(
    listener: TcpListener,
    addr: SocketAddr,
    shared: Arc<Shared>,
    shutdown: CancellationToken,
) {
    let mut mode = shared.mode.subscribe();
    let mut port = Port::Listening(listener);
    loop {
        let current = mode.borrow_and_update().clone();
        port = match (current == Mode::Refuse, port) {
            (true, Port::Listening(listener)) => {
                drop(listener);
                Port::Held(hold(addr))
            }
            (false, Port::Held(held)) => {
                drop(held);
                match rebind(addr, &shutdown).await {
                    Some(listener) => Port::Listening(listener),
                    None => Port::Held(None),
                }
            }
            (_, same) => same,
        };
        let listener = match &port {
            Port::Listening(listener) => Some(listener),
            Port::Held(_) => None,
        };
        let accepting = current != Mode::NoAccept;
        let accept = async {
            match &listener {
                Some(listener) => listener.accept().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = shutdown.cancelled() => return,
            changed = mode.changed() => if changed.is_err() { return },
            accepted = accept, if accepting => match accepted {
                Ok((stream, _)) => {
                    tokio::spawn(connection(stream, shared.clone(), shutdown.clone()));
                }
                Err(e) => {
                    eprintln!("fake-upstream {}: accept failed: {e}", shared.name);
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            },
        }
    }
}

/// A fake backend's port: listened on, or held without listening while it refuses.
enum Port {
    Listening(TcpListener),
    Held(Option<tokio::net::TcpSocket>),
}

/// `addr` bound without listening: the kernel refuses every connection to it (a reset to the
/// first packet), as to a closed port, while no one else can bind it. `None` if it cannot be
/// bound (the port is then closed, as before).
pub(crate) fn hold(addr: SocketAddr) -> Option<tokio::net::TcpSocket> {
    let socket = match addr {
        SocketAddr::V4(_) => tokio::net::TcpSocket::new_v4(),
        SocketAddr::V6(_) => tokio::net::TcpSocket::new_v6(),
    }
    .ok()?;
    socket.set_reuseaddr(true).ok()?;
    socket.bind(addr).ok()?;
    Some(socket)
}

/// Listens on `addr` again after refusing, retrying while something else briefly holds the port.
pub(crate) async fn rebind(addr: SocketAddr, shutdown: &CancellationToken) -> Option<TcpListener> {
    while !shutdown.is_cancelled() {
        match TcpListener::bind(addr).await {
            Ok(listener) => return Some(listener),
            Err(e) => {
                eprintln!("fake-upstream: cannot listen on {addr} again: {e}; retrying");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
    None
}

/// Serves one connection until it ends, the backend starts refusing, or it is dropped.
async fn connection(stream: TcpStream, shared: Arc<Shared>, shutdown: CancellationToken) {
    let mut mode = shared.mode.subscribe();
    let service = service_fn(|request| respond(request, shared.clone()));
    let wire = Wire::new(stream, shared.mode.subscribe());
    let serving = http1::Builder::new().serve_connection(TokioIo::new(wire), service);
    tokio::select! {
        _ = serving => {}
        _ = shutdown.cancelled() => {}
        _ = mode.wait_for(|mode| *mode == Mode::Refuse) => {}
    }
}

async fn respond(
    request: Request<Incoming>,
    shared: Arc<Shared>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let path = request.uri().path().to_owned();
    match (request.method(), path.as_str()) {
        (&Method::GET, "/__counts") => {
            let Counts {
                probes,
                requests,
                with_routing_header,
            } = shared.counts();
            let body = serde_json::json!({
                "probes": probes,
                "requests": requests,
                "with_routing_header": with_routing_header,
            });
            return Ok(reply(&shared, StatusCode::OK, body.to_string()));
        }
        (&Method::PUT, "/__mode") => return Ok(change_mode(request, &shared).await),
        _ => {}
    }
    let page = if request.method() == Method::GET && path == PROBE_PATH {
        shared.probes.fetch_add(1, Ordering::Relaxed);
        shared.probe_arrived();
        0
    } else {
        shared.requests.fetch_add(1, Ordering::Relaxed) + 1
    };
    if request.headers().contains_key(ROUTING_HEADER) {
        shared.with_routing_header.fetch_add(1, Ordering::Relaxed);
    }
    if !shared.capacity().admit(shared.started.elapsed()) {
        shared.turned_away.fetch_add(1, Ordering::Relaxed);
        return Ok(reply(
            &shared,
            StatusCode::SERVICE_UNAVAILABLE,
            format!("{} over capacity\n", shared.name),
        ));
    }
    let (answer, drain) = {
        let mode = shared.mode.borrow();
        (
            mode.answer(&path, shared.started.elapsed(), page),
            mode.signals_drain(&path),
        )
    };
    match answer {
        Answer::Respond { status, after } => {
            // A zero sleep would still wait for tokio's next 1 ms timer tick.
            if !after.is_zero() {
                tokio::time::sleep(after).await;
            }
            let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            let mut response = reply(
                &shared,
                status,
                format!("{} {}\n", shared.name, status.as_u16()),
            );
            if drain {
                response.headers_mut().insert(
                    SIGNAL_HEADER,
                    hyper::header::HeaderValue::from_static("true"),
                );
            }
            Ok(response)
        }
        Answer::Never => std::future::pending().await,
    }
}

async fn change_mode(request: Request<Incoming>, shared: &Shared) -> Response<Full<Bytes>> {
    let body = match request.into_body().collect().await {
        Ok(body) => body.to_bytes(),
        Err(e) => return reply(shared, StatusCode::BAD_REQUEST, format!("{e}\n")),
    };
    match String::from_utf8_lossy(&body).trim().parse::<Mode>() {
        Ok(mode) => {
            let text = format!("{mode}\n");
            shared.set_mode(mode);
            reply(shared, StatusCode::OK, text)
        }
        Err(e) => reply(shared, StatusCode::BAD_REQUEST, format!("{e}\n")),
    }
}

fn reply(shared: &Shared, status: StatusCode, body: String) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    if let Ok(name) = shared.name.parse() {
        response.headers_mut().insert(NAME_HEADER, name);
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_switch_at_probe_is_met_first_by_the_probe() {
        let app = FakeUpstream::start("app1", Mode::Ok).await.unwrap();
        let http = reqwest::Client::builder().no_proxy().build().unwrap();
        let get = |path: &str| {
            let request = http.get(format!("http://{}{path}", app.addr()));
            async move { request.send().await.unwrap().status().as_u16() }
        };
        assert_eq!(get("/").await, 200);
        let switch = app.switch_at_probe(Mode::Status(502), Duration::from_secs(2));
        let (before, probe) = tokio::join!(switch, async {
            // A page while the switch waits is still served as before.
            let page = get("/").await;
            (page, get(PROBE_PATH).await)
        });
        assert_eq!(before.unwrap(), 2);
        assert_eq!(probe, (200, 502));
        assert_eq!(get("/").await, 502);
    }

    #[tokio::test]
    async fn a_switch_at_probe_without_a_probe_is_an_error_naming_the_backend() {
        let app = FakeUpstream::start("app1", Mode::Ok).await.unwrap();
        let err = app
            .switch_at_probe(Mode::Status(502), Duration::from_millis(20))
            .await
            .unwrap_err();
        assert_eq!(err.to_string(), "app1 was not probed");
        assert_eq!(app.mode(), Mode::Ok);
    }
}
