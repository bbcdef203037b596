//! Pools the forms' tests render: two backends, one passing its probes and one failing them, with
//! a fleet or without.

use crate::active::{MadeBy, ProbeAnswer};
use crate::etcd::shown::{Overview, Shown, Watching};
use crate::pool::Pool;
use std::time::Duration;
use upcheck_config::Config;

/// A probe's answer of `status`, with no body and no drain signal, made by `made_by`.
pub(super) fn answer(status: u16, made_by: MadeBy) -> ProbeAnswer<'static> {
    ProbeAnswer {
        status,
        made_by,
        signalled: false,
        body: b"",
    }
}

/// app1 passes its first probe and app-2 fails it (answering 502), under `config`.
fn pool_of(config: &[u8]) -> Pool {
    let config = Config::parse(config).unwrap_or_else(|e| panic!("{e}"));
    let mut pool = Pool::new(config, Duration::ZERO, |_| ());
    let _ = pool.lease(crate::pool::LeaseHeld::Here { seed: 1 }, Duration::ZERO);
    let _ = pool.probe_sent(0, 1, Duration::ZERO);
    let _ = pool.probe_sent(1, 2, Duration::ZERO);
    let _ = pool.probe_answered(1, answer(200, MadeBy::Backend), Duration::from_millis(10));
    let _ = pool.probe_answered(2, answer(502, MadeBy::Backend), Duration::from_millis(20));
    pool
}

/// app1 and app-2, each after its first probe ([`pool_of`]).
pub(super) fn pool() -> Pool {
    pool_of(br#"{"upstreams":[{"name":"app1"},{"name":"app-2"}]}"#)
}

/// [`pool`] with app-2's last change noted as `upcheck backends` writes it, with characters HTML
/// gives a meaning to.
pub(super) fn noted_pool() -> Pool {
    pool_of(
        br#"{"upstreams":[{"name":"app1"},{"name":"app-2","note":"drain by alice@ops-1 at 2026-12-06 22:30:01 UTC: <b>sale</b> & more"}]}"#,
    )
}

/// app-2 fails its first probe and passes at 30 s, warming up over 100 s.
pub(super) fn warming_pool() -> Pool {
    let mut pool = pool_of(
        br#"{"upstreams":[{"name":"app1"},{"name":"app-2"}],"health_checks":{"slow_start":"100s"}}"#,
    );
    let _ = pool.probe_sent(1, 3, Duration::from_secs(30));
    let _ = pool.probe_answered(3, answer(200, MadeBy::Backend), Duration::from_secs(30));
    pool
}

/// app1's duty held here (lease 2a), app-2's by balancer ff, read at 700 ms, on the clock.
pub(super) fn fleet(pool: &Pool, local: bool) -> Shown {
    fleet_watching(pool, local, None)
}

/// The same, following etcd with `watching`.
pub(super) fn fleet_watching(pool: &Pool, local: bool, watching: Option<Watching>) -> Shown {
    let duties = pool.members().iter().map(|m| m.key.clone());
    let duties = duties.zip([Some(0x2a), Some(0xff)]);
    let overview = Overview {
        me: Some(0x2a),
        local,
        read: Some(Duration::from_millis(700)),
        balancers: 3,
        watching,
    };
    Shown::new(overview, duties)
}

/// The row of the backend at `index` in an HTML page.
pub(super) fn row(html: &str, index: usize) -> &str {
    let start = html
        .find(&format!("<tr id=\"backend-{index}\""))
        .unwrap_or_else(|| panic!("no row {index}: {html}"));
    let rest = html.get(start..).unwrap_or_default();
    rest.get(..rest.find("</tr>").unwrap_or(rest.len()))
        .unwrap_or_default()
}
