//! Running the calls of one assistant message: concurrently under the session's cap,
//! results in call order.
//!
//! Calls are grouped as the model emitted them: consecutive calls of tools that are
//! concurrency-safe ([`tool_api::ToolDefinition::is_concurrency_safe`], by default the
//! `none` and `read` tools) run together; a call of any other tool runs alone, after the
//! calls before it and before the calls after it. So `[read, read, write, read]` runs as
//! `[read, read]`, then `[write]`, then `[read]`, and two writes never race. Within a
//! group, the session's concurrency cap (default 4) bounds how many execute at once; the
//! rest queue in order.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use crate::Dispatcher;
use crate::result::{ToolResultBlock, ToolUse};
use crate::session::Session;

/// Polls a set of futures on the current task until all are done; outputs in input order.
struct JoinAll<F: Future> {
    futures: Vec<Option<Pin<Box<F>>>>,
    outputs: Vec<Option<F::Output>>,
}

impl<F: Future> Future for JoinAll<F> {
    type Output = Vec<F::Output>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let mut pending = false;
        for (slot, out) in this.futures.iter_mut().zip(this.outputs.iter_mut()) {
            if let Some(fut) = slot {
                match fut.as_mut().poll(cx) {
                    Poll::Ready(v) => {
                        *out = Some(v);
                        *slot = None;
                    }
                    Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            Poll::Pending
        } else {
            Poll::Ready(this.outputs.iter_mut().filter_map(Option::take).collect())
        }
    }
}

fn join_all<F: Future>(futures: impl IntoIterator<Item = F>) -> JoinAll<F> {
    let futures: Vec<Option<Pin<Box<F>>>> =
        futures.into_iter().map(|f| Some(Box::pin(f))).collect();
    let outputs = futures.iter().map(|_| None).collect();
    JoinAll { futures, outputs }
}

impl<F: Future> Unpin for JoinAll<F> {}

impl Dispatcher {
    fn is_concurrency_safe(&self, name: &str, session: &Session) -> bool {
        // An unknown tool fails at once, so it can run with anything.
        self.lookup(name, &session.state)
            .is_none_or(|r| r.concurrency_safe)
    }

    /// Runs the calls of one assistant message and returns their results in call order.
    /// See the [module docs](self) for how calls are grouped.
    pub async fn dispatch_batch(
        &self,
        calls: Vec<ToolUse>,
        session: &Session,
    ) -> Vec<ToolResultBlock> {
        let mut results = Vec::with_capacity(calls.len());
        let mut group: Vec<ToolUse> = Vec::new();
        for call in calls {
            if self.is_concurrency_safe(&call.name, session) {
                group.push(call);
                continue;
            }
            if !group.is_empty() {
                let batch = std::mem::take(&mut group);
                results
                    .extend(join_all(batch.into_iter().map(|c| self.dispatch(c, session))).await);
            }
            results.push(self.dispatch(call, session).await);
        }
        if !group.is_empty() {
            results.extend(join_all(group.into_iter().map(|c| self.dispatch(c, session))).await);
        }
        results
    }
}
