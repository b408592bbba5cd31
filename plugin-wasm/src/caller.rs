//! Whom a store serves: which plugin, which tool, and where it may send HTTP requests.

use std::sync::Arc;

use sandbox::HostList;

/// Whom a store serves: which plugin, which tool (none while describing), where it may
/// send HTTP requests.
pub(crate) struct Caller {
    pub(crate) plugin: String,
    pub(crate) tool: Option<(String, tool_api::SideEffect)>,
    pub(crate) hosts: Arc<HostList>,
}
