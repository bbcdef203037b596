//! The filter's role (`role`): route the pool's traffic, or serve its status page with the
//! page's own fields (`status_path`, `status_public`). A module of its own because the role
//! decides which of the top level's fields mean anything, and `validate` refuses the page's
//! fields in a traffic filter by it.

use serde::Serialize;

/// What a filter configured with a pool does with it.
///
/// The page is not served where the traffic goes: a traffic filter that answered it would read
/// every request's `:path` to find the few asking for it. A second listener (on loopback, which
/// also closes the page to other machines) runs the same module in the same `vm_id` with the
/// pool's configuration and `"role": "status_page"`; it shows what the traffic filters share.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
#[serde(tag = "role", rename_all = "snake_case")]
pub enum Role {
    /// Picks a backend for each request, watches its answer, probes (the VM holding the lease)
    /// and shares what it learns. Serves no page. The default (`"role": "traffic"`).
    #[default]
    Traffic,
    /// Answers the status page and nothing else (404 for any other path): it reads the tables
    /// the pool's traffic filters share each time the page is asked for, and never probes,
    /// announces, routes or writes shared data (`"role": "status_page"`).
    StatusPage(StatusPage),
}

/// The status page, as a [`Role::StatusPage`] configuration serves it. Defaults in
/// [`StatusPage::default`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StatusPage {
    /// Where it is: plain text at this path, JSON at the path plus `.json`, HTML plus `.html`
    /// (JSON `status_path`).
    #[serde(rename = "status_path")]
    pub path: String,
    /// Whether connections made to an address other than loopback may read it (JSON
    /// `status_public`); if not, they get 403.
    #[serde(rename = "status_public")]
    pub public: bool,
}

impl Default for StatusPage {
    fn default() -> Self {
        StatusPage {
            path: "/upcheck/status".into(),
            public: false,
        }
    }
}
