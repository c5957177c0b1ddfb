//! The log of failed requests: each failure named by a path of its inode and written once, by a
//! thread of its own.

use crate::Logger;
use sealfs_reader::{Image, Visit, WalkEvent};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

/// Failed requests' log lines: each failure is named by its path ([`path_of`], a walk of the tree
/// that reads the image: over a network, and while the link fails, that takes seconds) and written
/// by a thread of its own, so the request that failed is answered at once. Started at the first
/// failure (a daemon forks after the filesystem is made); lines still queued at unmount are
/// written for a few seconds at most.
pub(crate) struct FailureLog {
    log: Arc<dyn Fn(&str) + Send + Sync>,
    /// The worker, once started; `true` once drained (at unmount).
    worker: Mutex<(Option<FailureWorker>, bool)>,
}

struct FailureWorker {
    queue: mpsc::Sender<(u64, String)>,
    /// Closed when the worker has written every line queued.
    done: mpsc::Receiver<()>,
}

/// How long an unmount waits for queued failures to be named and logged.
const FAILURE_LOG_DRAIN: Duration = Duration::from_secs(10);

impl FailureLog {
    pub(crate) fn new(log: Logger) -> FailureLog {
        FailureLog {
            log: Arc::from(log),
            worker: Mutex::new((None, false)),
        }
    }

    /// Queues the failure of `nid` (`what` failed) to be named and logged.
    pub(crate) fn push(&self, image: &Arc<Image>, root_nid: u64, nid: u64, what: String) {
        let mut worker = self.worker.lock().unwrap_or_else(|e| e.into_inner());
        if worker.1 {
            return (self.log)(&format!("<nid {nid}>: {what}"));
        }
        let w = worker.0.get_or_insert_with(|| {
            let (queue, rx) = mpsc::channel::<(u64, String)>();
            let (done_tx, done) = mpsc::channel::<()>();
            let (image, log) = (image.clone(), self.log.clone());
            std::thread::spawn(move || {
                let _done = done_tx;
                for (nid, what) in rx {
                    log(&format!("{}: {what}", path_of(&image, root_nid, nid)));
                }
            });
            FailureWorker { queue, done }
        });
        if let Err(mpsc::SendError((nid, what))) = w.queue.send((nid, what)) {
            (self.log)(&format!("<nid {nid}>: {what}"));
        }
    }

    /// Waits (a bounded time) for the lines queued to be written; later failures are logged
    /// unnamed, at once.
    pub(crate) fn drain(&self) {
        let w = {
            let mut worker = self.worker.lock().unwrap_or_else(|e| e.into_inner());
            worker.1 = true;
            worker.0.take()
        };
        let Some(w) = w else {
            return;
        };
        drop(w.queue);
        let _ = w.done.recv_timeout(FAILURE_LOG_DRAIN);
    }
}

/// A path of `nid` in the image, found by walking the tree from the root (only when a failure is
/// logged, so nothing is kept per inode while serving). Gives `<nid N>` if the walk does not find
/// it within a bound (damaged directories are skipped).
fn path_of(image: &Image, root_nid: u64, nid: u64) -> String {
    const MAX_VISITED: usize = 1 << 21;
    if nid == root_nid {
        return "/".into();
    }
    let Ok(root) = image.inode(root_nid) else {
        return format!("<nid {nid}>");
    };
    let mut visited = 0usize;
    let mut found = None;
    let _ = image.walk(&root, b"", &mut |event| {
        let (path, entry) = match event {
            WalkEvent::Entry(e) => (e.path, e.entry),
            // An entry whose inode is damaged is still named.
            WalkEvent::Error {
                path,
                entry: Some(entry),
                ..
            } => (path, entry),
            WalkEvent::Dir { .. } | WalkEvent::Error { entry: None, .. } => {
                return Ok(Visit::Continue)
            }
        };
        visited += 1;
        if entry.nid == nid {
            found = Some(sealfs_reader::show_path(&[b"/", path].concat()));
            return Err(());
        }
        if visited > MAX_VISITED {
            return Err(());
        }
        Ok(Visit::Continue)
    });
    found.unwrap_or_else(|| format!("<nid {nid}>"))
}
