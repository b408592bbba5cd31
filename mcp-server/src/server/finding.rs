//! The two discovery tools as a call meets them ([`crate::discovery`]): `find_tools`
//! answered here, from the session's own ranking; `call_found_tool` unwrapped into the
//! call of the tool it names, which then goes the way of every call.

use rmcp::model::{CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock};

use super::McpServer;
use crate::caller::Caller;
use crate::discovery::{self, CALL_FOUND_TOOL, FIND_TOOLS};
use crate::era::Era;

/// What a call to one of the discovery tools comes to.
pub(super) enum Discovering {
    /// Not one (discovery is off for the session, or the call names another tool).
    No(CallToolRequestParams),
    /// Answered here (a search, or a `call_found_tool` that names nothing callable).
    Answered(CallToolResponse),
    /// `call_found_tool`: the call of the tool it names, to be made as that tool's own.
    Call(CallToolRequestParams),
}

impl McpServer {
    /// Takes a call to `find_tools` or `call_found_tool` when discovery is on for the
    /// session; any other call goes on as it came, at once. A search runs on a blocking
    /// thread: with a text model it encodes its query (milliseconds) and, the first time
    /// after the tools changed, the tools' texts.
    pub(super) async fn discovering(
        &self,
        mut request: CallToolRequestParams,
        caller: &Caller,
        session: &dispatcher_core::Session,
    ) -> Discovering {
        let name = request.name.as_ref();
        if name != FIND_TOOLS && name != CALL_FOUND_TOOL {
            return Discovering::No(request);
        }
        let discovery = self.shared.discovery();
        let dispatcher = &self.shared.dispatcher;
        if !discovery.applies(dispatcher.listing_for_session(session).len()) {
            return Discovering::No(request);
        }
        let arguments = request.arguments.take().unwrap_or_default();
        if name == CALL_FOUND_TOOL {
            return match discovery::call_of(arguments) {
                Ok((tool, arguments)) => {
                    tracing::debug!(tool, "{CALL_FOUND_TOOL}: called as the tool's own");
                    request.name = tool.into();
                    request.arguments = Some(arguments);
                    Discovering::Call(request)
                }
                Err(why) => Discovering::Answered(refused(why)),
            };
        }
        let (query, limit) = match discovery::query_of(&arguments, discovery.results) {
            Ok(asked) => asked,
            Err(why) => return Discovering::Answered(refused(why)),
        };
        let (searcher, searched) = (dispatcher.clone(), session.clone());
        let search = move || searcher.search_tools(&searched, &query, limit);
        let found = match tokio::task::spawn_blocking(search).await {
            Ok(found) => found,
            Err(e) => return Discovering::Answered(refused(format!("the search failed: {e}"))),
        };
        // In a 2025-era session the found tools join the list; the watcher of the client's
        // list tells it (`notifications/tools/list_changed`). A request of a client without
        // a connection that outlives it (no watcher) is told to call them by name.
        let joins = caller.era == Era::Session && self.found.is_watched();
        if joins {
            self.found
                .add(found.iter().map(|f| f.listing.definition.name.as_str()));
        }
        let tools = super::tools_of(
            dispatcher,
            session,
            found.iter().map(|f| f.listing.clone()).collect(),
        );
        tracing::debug!(found = found.len(), "{FIND_TOOLS}");
        Discovering::Answered(CallToolResponse::Complete(discovery::answer(
            &found, tools, joins,
        )))
    }
}

/// A discovery tool's refusal of its arguments, as the tool's error for the model.
fn refused(why: String) -> CallToolResponse {
    CallToolResponse::Complete(CallToolResult::error(vec![ContentBlock::text(why)]))
}
