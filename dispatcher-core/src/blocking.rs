//! Where a blocking call runs: a warm runner thread when one is free, else tokio's
//! blocking pool.
//!
//! Handing a call to tokio's blocking pool and back costs two thread wake-ups: the pool's
//! thread is woken to run it, and the caller's thread is woken to take the result. On a
//! cloud VM a wake-up costs tens of microseconds (the sleeping virtual CPU must be
//! interrupted and rescheduled by the hypervisor), far more than a short tool takes.
//!
//! A warm runner avoids both when calls come close together:
//!
//! - after a quick job (one that ended within [`CALLER_SPIN`]), a runner keeps looking for
//!   the next one for [`RUNNER_SPIN`] before it parks, so a job handed to it within that
//!   window starts without a wake-up; after a slow one it parks at once, so it never takes
//!   a CPU from what the job itself waited for (an isolated plugin's worker process);
//! - the caller of a job on a runner looks for the result for up to [`CALLER_SPIN`]
//!   before it yields to the async runtime, so a job that ends within that budget is
//!   taken without a wake-up either. It skips this for a tool whose recent calls took longer than the budget
//!   ([`RunTimes`]), so a slow tool costs no spinning.
//!
//! A tool whose recent calls took longer than [`CALLER_SPIN`] goes to tokio's blocking
//! pool, as every blocking call did before: a wake-up is a small part of a slow call, and
//! measured with an isolated plugin (a socket round trip to its worker process, about
//! 100 µs) the runner was no faster and often slower.
//!
//! Both windows are bounded, so an idle host spins for at most [`RUNNER_SPIN`] after its
//! last quick blocking call, and a caller's thread is held for at most [`CALLER_SPIN`] (the same
//! order as an inline call). There is one runner per CPU (at most four), started on first
//! use; on a single CPU there are none, since spinning there only delays the thread it
//! waits for. When every runner is busy (a burst, or a tool that hangs and was abandoned
//! at its timeout) the call goes to tokio's blocking pool exactly as before: runners make
//! blocking calls faster, never fewer.

use std::any::Any;
use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::Pin;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::task::{Context, Poll};
use std::thread::Thread;
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

/// How long a runner looks for its next job before it parks.
pub(crate) const RUNNER_SPIN: Duration = Duration::from_micros(50);

/// How long a caller looks for its job's result before it yields.
pub(crate) const CALLER_SPIN: Duration = Duration::from_micros(50);

/// A runner with no job, looking for one.
const IDLE: u8 = 0;
/// A runner with no job, parked.
const PARKED: u8 = 1;
/// A caller took the runner and is handing it a job.
const CLAIMED: u8 = 2;
/// The runner has a job (or runs it).
const BUSY: u8 = 3;
/// The runner's thread is not started yet.
const UNSTARTED: u8 = 4;

type Job = Box<dyn FnOnce() + Send>;

struct Runner {
    state: AtomicU8,
    job: Mutex<Option<Job>>,
    thread: OnceLock<Thread>,
}

struct Pool {
    runners: Box<[Arc<Runner>]>,
}

fn pool() -> &'static Pool {
    static POOL: OnceLock<Pool> = OnceLock::new();
    POOL.get_or_init(|| {
        let cpus = std::thread::available_parallelism().map_or(1, usize::from);
        let count = if cpus <= 1 { 0 } else { cpus.min(4) };
        Pool {
            runners: (0..count)
                .map(|_| {
                    Arc::new(Runner {
                        state: AtomicU8::new(UNSTARTED),
                        job: Mutex::new(None),
                        thread: OnceLock::new(),
                    })
                })
                .collect(),
        }
    })
}

impl Pool {
    /// Hands `job` to a free runner, or gives it back.
    fn submit(&self, job: Job) -> Result<(), Job> {
        for (i, runner) in self.runners.iter().enumerate() {
            for from in [IDLE, PARKED, UNSTARTED] {
                if runner
                    .state
                    .compare_exchange(from, CLAIMED, Ordering::Acquire, Ordering::Relaxed)
                    .is_err()
                {
                    continue;
                }
                *runner.job.lock().unwrap_or_else(PoisonError::into_inner) = Some(job);
                runner.state.store(BUSY, Ordering::Release);
                match from {
                    PARKED => {
                        if let Some(thread) = runner.thread.get() {
                            thread.unpark();
                        }
                    }
                    UNSTARTED => {
                        let own = runner.clone();
                        let started = std::thread::Builder::new()
                            .name(format!("toolhost-runner-{i}"))
                            .spawn(move || own.run());
                        match started {
                            Ok(_) => {}
                            Err(e) => {
                                // No thread: take the job back, and never try this runner
                                // again (it stays BUSY).
                                tracing::debug!("cannot start a runner thread: {e}");
                                let job = runner
                                    .job
                                    .lock()
                                    .unwrap_or_else(PoisonError::into_inner)
                                    .take();
                                return job.map_or(Ok(()), Err);
                            }
                        }
                    }
                    _ => {}
                }
                return Ok(());
            }
        }
        Err(job)
    }
}

impl Runner {
    fn run(&self) {
        // Before it can ever park: a caller that finds it parked unparks this thread.
        let _ = self.thread.set(std::thread::current());
        let mut spin = false;
        loop {
            self.wait_for_job(spin);
            let job = self
                .job
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .take();
            let start = Instant::now();
            if let Some(job) = job {
                // A job contains its own panics; this only keeps the runner alive.
                let _ = catch_unwind(AssertUnwindSafe(job));
            }
            // After a quick job the next one is likely close (its caller was spinning); after
            // a slow one, spinning would only take a CPU from whatever the job waited for
            // (an isolated plugin's worker, say).
            spin = start.elapsed() < CALLER_SPIN;
            self.state.store(IDLE, Ordering::Release);
        }
    }

    /// Returns once the state is BUSY: with `spin`, looks for it for [`RUNNER_SPIN`]
    /// first; then parks.
    fn wait_for_job(&self, spin: bool) {
        let start = Instant::now();
        let mut spins = 0u32;
        loop {
            if self.state.load(Ordering::Acquire) == BUSY {
                return;
            }
            spins = spins.wrapping_add(1);
            if (!spin || spins.is_multiple_of(64) && start.elapsed() >= RUNNER_SPIN)
                && self
                    .state
                    .compare_exchange(IDLE, PARKED, Ordering::AcqRel, Ordering::Relaxed)
                    .is_ok()
            {
                // A caller that takes a parked runner sets BUSY, then unparks it.
                while self.state.load(Ordering::Acquire) != BUSY {
                    std::thread::park();
                }
                return;
            }
            std::hint::spin_loop();
        }
    }
}

/// How a job handed to [`spawn`] ended.
pub(crate) enum Ended<R> {
    /// It returned.
    Returned(R),
    /// It panicked (a job that contains its own panics never does).
    Panicked(Box<dyn Any + Send>),
    /// It was lost without an answer (its runtime shut down).
    Lost,
}

/// A job handed to [`spawn`]: a future of how it ended.
pub(crate) struct Handle<R> {
    /// `None` once the result was taken.
    rx: Option<oneshot::Receiver<std::thread::Result<R>>>,
    /// The job went to a warm runner (else to tokio's blocking pool, whose thread must be
    /// woken first: spinning for it would only take the CPU it needs).
    on_runner: bool,
}

/// Runs `job` off the async threads: with `warm`, on a warm runner if one is free; else
/// on tokio's blocking pool. Must be called inside a tokio runtime; the job runs inside its
/// context.
pub(crate) fn spawn<R, F>(job: F, warm: bool) -> Handle<R>
where
    F: FnOnce() -> R + Send + 'static,
    R: Send + 'static,
{
    let runtime = tokio::runtime::Handle::current();
    let (tx, rx) = oneshot::channel();
    let job: Job = Box::new({
        let runtime = runtime.clone();
        move || {
            let _context = runtime.enter();
            let _ = tx.send(catch_unwind(AssertUnwindSafe(job)));
        }
    });
    let submitted = if warm { pool().submit(job) } else { Err(job) };
    let on_runner = match submitted {
        Ok(()) => true,
        Err(job) => {
            // Detached: the job sends its result through the channel either way.
            drop(runtime.spawn_blocking(job));
            false
        }
    };
    Handle {
        rx: Some(rx),
        on_runner,
    }
}

impl<R> Handle<R> {
    /// Looks for the result for up to `budget` without yielding; returns it if the job
    /// ended in that time. Does not look for a job on the blocking pool.
    pub(crate) fn spin(&mut self, budget: Duration) -> Option<Ended<R>> {
        if !self.on_runner {
            return None;
        }
        let rx = self.rx.as_mut()?;
        let start = Instant::now();
        let mut spins = 0u32;
        loop {
            match rx.try_recv() {
                Ok(r) => {
                    self.rx = None;
                    return Some(ended(Ok(r)));
                }
                Err(oneshot::error::TryRecvError::Closed) => {
                    self.rx = None;
                    return Some(Ended::Lost);
                }
                Err(oneshot::error::TryRecvError::Empty) => {}
            }
            spins = spins.wrapping_add(1);
            if spins.is_multiple_of(64) && start.elapsed() >= budget {
                return None;
            }
            std::hint::spin_loop();
        }
    }
}

fn ended<R>(r: Result<std::thread::Result<R>, oneshot::error::RecvError>) -> Ended<R> {
    match r {
        Ok(Ok(r)) => Ended::Returned(r),
        Ok(Err(payload)) => Ended::Panicked(payload),
        Err(_) => Ended::Lost,
    }
}

impl<R> Future for Handle<R> {
    type Output = Ended<R>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Ended<R>> {
        let Some(rx) = self.rx.as_mut() else {
            return Poll::Ready(Ended::Lost);
        };
        match Pin::new(rx).poll(cx) {
            Poll::Ready(r) => {
                self.rx = None;
                Poll::Ready(ended(r))
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

/// How long a tool's recent calls took (or waited for an answer): whether their caller
/// should spin for the next one's end before it yields.
#[derive(Debug, Default)]
pub struct RunTimes {
    /// A moving average of the last calls' durations, in nanoseconds.
    recent_ns: AtomicU64,
}

impl RunTimes {
    /// Records one call's duration.
    pub fn record(&self, took: Duration) {
        let took = u64::try_from(took.as_nanos()).unwrap_or(u64::MAX);
        let old = self.recent_ns.load(Ordering::Relaxed);
        // An average over about the last four calls; races lose an update, no more.
        let new = old - old / 4 + took / 4;
        self.recent_ns.store(new, Ordering::Relaxed);
    }

    /// Whether the tool's calls usually end within the caller's spin budget.
    pub(crate) fn usually_quick(&self) -> bool {
        self.usually_within(CALLER_SPIN)
    }

    /// Whether the recent calls took less than `budget`, on average.
    pub fn usually_within(&self, budget: Duration) -> bool {
        Duration::from_nanos(self.recent_ns.load(Ordering::Relaxed)) < budget
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_job_returns_its_value_through_the_handle() {
        let mut handle = spawn(|| 41 + 1, true);
        let ended = match handle.spin(Duration::from_millis(50)) {
            Some(ended) => ended,
            None => handle.await,
        };
        assert!(matches!(ended, Ended::Returned(42)));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_panicking_job_is_reported_and_the_runner_lives_on() {
        let ended = spawn(|| -> u32 { panic!("boom") }, true).await;
        let Ended::Panicked(payload) = ended else {
            panic!("not reported as a panic")
        };
        assert_eq!(payload.downcast_ref::<&str>(), Some(&"boom"));
        for i in 0..20u32 {
            assert!(matches!(spawn(move || i, true).await, Ended::Returned(r) if r == i));
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn jobs_beyond_the_runners_go_to_the_blocking_pool() {
        // More jobs than runners, all held until every one has started: those that found
        // no free runner must have run elsewhere, or this never ends.
        let n = pool().runners.len() + 3;
        let barrier = Arc::new(std::sync::Barrier::new(n));
        let handles: Vec<_> = (0..n)
            .map(|i| {
                let barrier = barrier.clone();
                spawn(
                    move || {
                        barrier.wait();
                        i
                    },
                    true,
                )
            })
            .collect();
        let mut got = Vec::new();
        for h in handles {
            match h.await {
                Ended::Returned(i) => got.push(i),
                _ => panic!("a job did not return"),
            }
        }
        assert_eq!(got, (0..n).collect::<Vec<_>>());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_job_runs_inside_the_callers_runtime() {
        let ended = spawn(|| tokio::runtime::Handle::try_current().is_ok(), true).await;
        assert!(matches!(ended, Ended::Returned(true)));
    }

    #[test]
    fn a_slow_tool_stops_the_caller_spinning() {
        let times = RunTimes::default();
        assert!(times.usually_quick());
        for _ in 0..8 {
            times.record(Duration::from_millis(2));
        }
        assert!(!times.usually_quick());
        for _ in 0..16 {
            times.record(Duration::from_micros(1));
        }
        assert!(times.usually_quick());
    }
}
