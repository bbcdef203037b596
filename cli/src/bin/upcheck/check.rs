//! `upcheck check`: a plugin configuration checked with the module's own parser.
//!
//! It prints the configuration in force, every default filled in, on standard output (JSON the
//! module reads back to the same configuration, so it can be saved and diffed), and its one-line
//! verdict on standard error, where it is seen without spoiling the JSON.

use std::io::{self, Write};
use std::path::Path;

use upcheck_cli::plugin;
use upcheck_policy::duration::display;
use upcheck_policy::{Config, RoutingMode};

use crate::files::{invalid, read};
use crate::Failure;

/// Checks the plugin configuration at `path` (`-`: standard input).
pub(crate) fn run(path: &Path) -> Result<(), Failure> {
    let config = plugin::check(&read(path)?).map_err(|e| invalid(path, e))?;
    let mut effective = config.effective_json();
    effective.push('\n');
    io::stdout()
        .write_all(effective.as_bytes())
        .map_err(|e| Failure::Output(format!("standard output: {e}")))?;
    eprintln!("ok: {}", summary(&config));
    Ok(())
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
    format!(
        "{} upstream{} ({}), routing {routing}; probes GET {} every {}, timeout {}; {} failure{} \
         within {} eject a backend{repeated}{shared}",
        names.len(),
        if names.len() == 1 { "" } else { "s" },
        names.join(", "),
        active.path,
        display(active.interval),
        display(active.timeout),
        passive.max_fails,
        if passive.max_fails == 1 { "" } else { "s" },
        display(passive.fail_duration),
    )
}
