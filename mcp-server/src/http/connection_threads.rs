//! The threads `serve --http` serves its connections on ([`ConnectionThreads`]): one a
//! core, each with a runtime of its own, a connection on one of them from its accept to
//! its close.
//!
//! On one runtime of a worker per core, a connection's task goes to whichever worker is
//! free, and a worker that finds more than one task ready wakes another to share them
//! (a futex and a context switch). A gateway's call is two such events (its client's
//! request, its server's answer), so its workers woke each other about once every six
//! calls and were preempted more than once every three (`perf stat`, 16 calls in flight
//! on 2 cores). Served on a thread of its own, a connection's requests, their calls, the
//! calls' own connections to mounted servers (kept per runtime: see
//! `mcp_toolsets`' pool) and the answers all stay on one thread, which sleeps in its own
//! `epoll_wait` when it has nothing to do. What runs elsewhere is unchanged: the accept
//! loop, the mounted servers' connections made at start, tools on the blocking pool.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use tokio::runtime::Handle;

/// The process's connection threads: started with the first connection, they last as
/// long as the process (what a call leaves running on one, such as a mounted server's
/// connection made for its caller, goes on serving later calls).
pub(super) struct ConnectionThreads {
    threads: Vec<Thread>,
}

/// One connection thread: its runtime, and how many connections it serves.
struct Thread {
    runtime: Handle,
    open: Arc<AtomicUsize>,
}

/// A connection counted on its thread while it lives.
pub(super) struct Counted(Arc<AtomicUsize>);

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl ConnectionThreads {
    /// The process's connection threads, started on first use: one per core. `None` when
    /// none could be started (the reason logged once): connections are then served on
    /// the runtime that accepted them.
    pub(super) fn get() -> Option<&'static ConnectionThreads> {
        static THREADS: OnceLock<Option<ConnectionThreads>> = OnceLock::new();
        THREADS
            .get_or_init(|| {
                let n = std::thread::available_parallelism().map_or(2, |n| n.get());
                match ConnectionThreads::start(n) {
                    Ok(threads) => Some(threads),
                    Err(e) => {
                        tracing::warn!(
                            "cannot start the threads connections are served on ({e}); each is served on the accepting runtime"
                        );
                        None
                    }
                }
            })
            .as_ref()
    }

    /// Starts `n` threads, each running a runtime of its own until the process ends.
    fn start(n: usize) -> std::io::Result<ConnectionThreads> {
        let mut threads = Vec::with_capacity(n);
        for i in 0..n {
            let (tx, rx) = std::sync::mpsc::channel();
            std::thread::Builder::new()
                .name(format!("toolhost-conn-{i}"))
                .spawn(move || {
                    let runtime = match tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                    {
                        Ok(runtime) => runtime,
                        Err(e) => {
                            let _ = tx.send(Err(e));
                            return;
                        }
                    };
                    let _ = tx.send(Ok(runtime.handle().clone()));
                    runtime.block_on(std::future::pending::<()>());
                })?;
            let runtime = rx.recv().map_err(|_| {
                std::io::Error::other("a connection thread ended before its runtime started")
            })??;
            threads.push(Thread {
                runtime,
                open: Arc::default(),
            });
        }
        Ok(ConnectionThreads { threads })
    }

    /// The runtime of the thread serving the fewest connections, the connection to come
    /// counted on it.
    pub(super) fn least_busy(&self) -> (&Handle, Counted) {
        let at = least(self.threads.iter().map(|t| t.open.load(Ordering::Relaxed)));
        let thread = &self.threads[at];
        thread.open.fetch_add(1, Ordering::Relaxed);
        (&thread.runtime, Counted(thread.open.clone()))
    }
}

/// The index of the smallest of `counts`, the first of equals (0 when there are none).
fn least(counts: impl Iterator<Item = usize>) -> usize {
    counts
        .enumerate()
        .min_by_key(|(i, n)| (*n, *i))
        .map_or(0, |(i, _)| i)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_connection_goes_to_the_thread_serving_the_fewest_the_first_of_equals() {
        let table: [(&[usize], usize); 5] = [
            (&[0, 0], 0),
            (&[1, 0], 1),
            (&[1, 1], 0),
            (&[3, 1, 2], 1),
            (&[2, 5, 2], 0),
        ];
        for (counts, expected) in table {
            assert_eq!(least(counts.iter().copied()), expected, "{counts:?}");
        }
    }

    #[test]
    fn each_thread_counts_its_connections_while_they_live() {
        let threads = ConnectionThreads::start(2).unwrap();
        let (_, first) = threads.least_busy();
        let (_, second) = threads.least_busy();
        let open = |threads: &ConnectionThreads| {
            threads
                .threads
                .iter()
                .map(|t| t.open.load(Ordering::Relaxed))
                .collect::<Vec<_>>()
        };
        assert_eq!(open(&threads), [1, 1], "one on each");
        drop(first);
        assert_eq!(open(&threads), [0, 1]);
        let (_, third) = threads.least_busy();
        assert_eq!(open(&threads), [1, 1], "the freed one takes the next");
        drop((second, third));
    }

    #[test]
    fn each_thread_runs_what_is_spawned_on_it_on_itself() {
        let threads = ConnectionThreads::start(2).unwrap();
        let names: Vec<String> = threads
            .threads
            .iter()
            .map(|t| {
                let (tx, rx) = std::sync::mpsc::channel();
                t.runtime.spawn(async move {
                    let _ = tx.send(std::thread::current().name().map(str::to_string));
                });
                rx.recv().unwrap().unwrap()
            })
            .collect();
        assert_eq!(names, ["toolhost-conn-0", "toolhost-conn-1"]);
    }
}
