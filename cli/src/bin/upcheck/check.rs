//! `upcheck check`: a plugin configuration checked with the module's own parser.
//!
//! It prints the configuration in force, every default filled in, on standard output (JSON the
//! module reads back to the same configuration, so it can be saved and diffed), and its one-line
//! verdict on standard error, where it is seen without spoiling the JSON.

use std::io::{self, Write};
use std::path::Path;

use serde_json::Value;
use upcheck_cli::deployment::probe_text;
use upcheck_cli::plugin;
use upcheck_policy::config::Active;
use upcheck_policy::duration::display;
use upcheck_policy::{Config, RoutingMode};

use crate::files::{invalid, read};
use crate::Failure;

/// Checks the plugin configuration at `path` (`-`: standard input).
pub(crate) fn run(path: &Path) -> Result<(), Failure> {
    let config = plugin::check(&read(path)?).map_err(|e| invalid(path, e))?;
    let mut effective = effective(&config);
    effective.push('\n');
    io::stdout()
        .write_all(effective.as_bytes())
        .map_err(|e| Failure::Output(format!("standard output: {e}")))?;
    eprintln!("ok: {}", summary(&config));
    Ok(())
}

/// The fields of `health_checks.active` a gRPC check does not use: the HTTP probe's.
const HTTP_ONLY: [&str; 4] = ["expect_status", "expect_body", "max_size", "drain_status"];

/// The configuration in force, every default filled in, as JSON the module reads back to the
/// same configuration. A gRPC check is printed without `path`, which the module refuses beside
/// `grpc`, and without the HTTP probe's fields it leaves at their defaults, which do not apply to
/// it: what remains is what the check uses (the service, the headers sent as metadata, the
/// interval, the timeout, the thresholds).
fn effective(config: &Config) -> String {
    let json = config.effective_json();
    if config.health_checks.active.grpc.is_none() {
        return json;
    }
    let (Ok(mut document), Ok(defaults)) = (
        serde_json::from_str::<Value>(&json),
        serde_json::to_value(Active::default()),
    ) else {
        return json;
    };
    if let Some(Value::Object(active)) = document.pointer_mut("/health_checks/active") {
        active.remove("path");
        for field in HTTP_ONLY {
            if active.get(field) == defaults.get(field) {
                active.remove(field);
            }
        }
    }
    serde_json::to_string_pretty(&document).unwrap_or(json)
}

/// One line: the upstreams, the routing, the probes, the ejection rule and what is repeated on
/// another backend (what cluster routing costs); for a status page, the page and whose it is.
fn summary(config: &Config) -> String {
    let names: Vec<&str> = config.upstreams.iter().map(|u| u.name.as_str()).collect();
    if let Some(page) = config.status_page() {
        return format!(
            "the status page of {} upstream{} ({}) at {}, on {}; it never probes or routes",
            names.len(),
            if names.len() == 1 { "" } else { "s" },
            names.join(", "),
            page.path,
            if page.public {
                "every connection"
            } else {
                "connections made to a loopback address only"
            },
        );
    }
    let routing = match config.routing {
        RoutingMode::Host => "host",
        RoutingMode::Cluster => "cluster",
    };
    let active = &config.health_checks.active;
    let passive = &config.health_checks.passive;
    let shared = match &config.fleet {
        Some(fleet) => format!(
            "; probe duties shared with the other balancers through etcd (cluster {}, prefix {}, \
             lease {})",
            fleet.cluster,
            fleet.prefix,
            display(fleet.lease_ttl)
        ),
        None => String::new(),
    };
    let retries = &config.retries;
    let repeated = match (config.routing, retries.enabled) {
        (RoutingMode::Host, true) => format!(
            "; a GET's or HEAD's 5xx is repeated on a peer while its backend fails alone, drains \
             or warms up, within {} % of the requests plus {} a second",
            retries.budget_percent, retries.min_per_second
        ),
        (RoutingMode::Host, false) => {
            "; retries off: a 5xx before its backend is ejected reaches its user".to_owned()
        }
        (RoutingMode::Cluster, _) => "; routing cluster repeats no request on another backend: \
             a 5xx before its backend is ejected reaches its user (routing host repeats it)"
            .to_owned(),
    };
    // A gRPC check is said with what decides it, since no path or status shows it.
    let streaks = match active.grpc {
        None => String::new(),
        Some(_) => format!(
            " (SERVING passes; {} passing probe{} make{} a backend healthy, {} failing one{} \
             unhealthy)",
            active.passes,
            if active.passes == 1 { "" } else { "s" },
            if active.passes == 1 { "s" } else { "" },
            active.fails,
            if active.fails == 1 { "" } else { "s" },
        ),
    };
    format!(
        "{} upstream{} ({}), routing {routing}; probes {} every {}, timeout {}{streaks}; {} \
         failure{} within {} eject a backend{repeated}{shared}",
        names.len(),
        if names.len() == 1 { "" } else { "s" },
        names.join(", "),
        probe_text(active),
        display(active.interval),
        display(active.timeout),
        passive.max_fails,
        if passive.max_fails == 1 { "" } else { "s" },
        display(passive.fail_duration),
    )
}
