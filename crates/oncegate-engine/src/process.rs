//! `Process`: the tasks of one gateway instance, so a simulation can kill them all.
//!
//! A real crash ends every task of the process at whatever await point it had reached:
//! the caller's call, the detached effect task the [`Gate`](crate::Gate) spawns (which
//! by design outlives its caller), and the sweep. Inside one test process the only way
//! to get that is to abort each of those tasks, so a gate built with
//! [`Gate::in_process`](crate::Gate::in_process) spawns its effect tasks through
//! [`Process::spawn`], and the simulation spawns the instance's calls and sweep there
//! too. [`Process::kill`] then aborts them all, and anything spawned afterwards, as
//! SIGKILL would. A gate without a process (production) spawns plainly with
//! `tokio::spawn` and pays nothing for this.

use std::future::Future;
use std::sync::{Arc, Mutex};

use tokio::task::{AbortHandle, JoinHandle};

/// The abortable task set of one simulated gateway process. Clones share it.
#[derive(Clone, Debug, Default)]
pub struct Process {
    inner: Arc<Mutex<State>>,
}

#[derive(Debug, Default)]
struct State {
    killed: bool,
    tasks: Vec<AbortHandle>,
}

impl Process {
    /// A live process with no tasks.
    pub fn new() -> Self {
        Self::default()
    }

    /// Spawns `future` as a task of this process. After [`Process::kill`] the task is
    /// aborted before it first runs.
    pub fn spawn<F>(&self, future: F) -> JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        let handle = tokio::spawn(future);
        let mut state = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if state.killed {
            handle.abort();
        } else {
            // Forget finished tasks so a long-lived process does not grow without bound.
            state.tasks.retain(|t| !t.is_finished());
            state.tasks.push(handle.abort_handle());
        }
        handle
    }

    /// Aborts every task of the process, now and from now on.
    pub fn kill(&self) {
        let tasks = {
            let mut state = self.inner.lock().unwrap_or_else(|e| e.into_inner());
            state.killed = true;
            std::mem::take(&mut state.tasks)
        };
        for task in tasks {
            task.abort();
        }
    }

    /// Whether [`Process::kill`] was called.
    pub fn is_killed(&self) -> bool {
        self.inner.lock().unwrap_or_else(|e| e.into_inner()).killed
    }
}
