//! Why a backend takes traffic or not, in a sentence: the rule that decided it, asked in the order
//! the guard rules decide it, with the figures that tipped it. The HTML page shows it per backend;
//! the decisions are made elsewhere (the guard, drains, the passive and outlier checks); this
//! only words them.

use super::model::{ago, Line};
use crate::active::Health;
use crate::guard::Guard;
use crate::pool::Pool;
use crate::retry::Grounds;
use crate::time::Time;
use upcheck_config::duration;

/// Why the backend of `line` takes traffic or not at `now`.
pub(super) fn why<H>(line: &Line<'_>, pool: &Pool<H>, now: Time) -> String {
    let config = pool.config();
    let passive = &config.health_checks.passive;
    let guard = pool.guard();
    if let (true, Some((verdict, until))) = (line.ejected, &line.outlier) {
        return format!(
            "ejected as the odd one out until {} (in {}): {verdict}",
            time_of_day(*until),
            ago(*until, now)
        );
    }
    if let Some(drain) = line.drain {
        let kept = if line.routable {
            ", kept in: every backend drains"
        } else {
            ", no new requests"
        };
        return format!(
            "draining since {} (for {}){kept}: {}",
            time_of_day(drain.since),
            ago(now, drain.since),
            drain.by
        );
    }
    if line.ejected {
        let until = line.next_expiry.unwrap_or(now);
        return format!(
            "ejected until {} (in {}): {} failures within {}",
            time_of_day(until),
            ago(until, now),
            line.failures,
            duration::display(passive.fail_duration)
        );
    }
    if !line.routable {
        return if !line.accepting {
            "refusing connections while other backends accept them".to_owned()
        } else {
            match line.status {
                Health::Unhealthy => {
                    let streak = line.streak;
                    let passes = config.health_checks.active.passes;
                    match line.last_probe {
                        Some((_, outcome)) if streak < 0 => format!(
                            "failing its probes: {} in a row, the last {outcome}",
                            streak.unsigned_abs()
                        ),
                        _ if streak > 0 => format!(
                            "failing its probes, recovering: {streak} of {passes} passes in a row"
                        ),
                        _ => "failing its probes".to_owned(),
                    }
                }
                Health::Unknown => {
                    "no verdict from its probes yet, and others are healthy".to_owned()
                }
                Health::Healthy => format!("left out by the pool guard: {guard}"),
            }
        };
    }
    if let Some(note) = line.overruled(now) {
        return note;
    }
    let mut why = match (line.status, guard) {
        (Health::Healthy, _) if line.failures_full => format!(
            "passing its probes; its failures would eject it, but max_ejection_percent ({}%) keeps it",
            config.max_ejection_percent
        ),
        (Health::Healthy, _) => match line.warming {
            Some(w) => format!(
                "passing its probes; warming up: {} % of its weight, the whole from {} (in {})",
                w.percent(),
                time_of_day(w.until),
                ago(w.until, now)
            ),
            None => "passing its probes".to_owned(),
        },
        (Health::Unknown, Guard::Off) => {
            "no verdict from its probes yet, and no backend is known healthy".to_owned()
        }
        (_, guard) => format!("kept in by the pool guard: {guard}"),
    };
    why.push_str(match line.retry {
        Some(Grounds::OddOneOut) => {
            "; its 5xx are repeated on its peers: it fails while they serve"
        }
        Some(Grounds::Alike) => {
            "; its 5xx reach users: its peers fail alike (an app bug or a shared dependency), so none is repeated"
        }
        _ => "",
    });
    why
}

/// The UTC time of day of `at` (a time since the Unix epoch, as the host's clock gives it).
fn time_of_day(at: Time) -> String {
    let secs = at.as_secs() % 86_400;
    format!(
        "{:02}:{:02}:{:02} UTC",
        secs / 3_600,
        secs / 60 % 60,
        secs % 60
    )
}
