//! What `SIGINT`, `SIGTERM` and `SIGHUP` do to a command that writes an output (`build`, `seal`):
//! remove the output's named temporary file, then end the process by that signal, as it would have
//! ended without this.
//!
//! Outputs are written to unnamed (`O_TMPFILE`) files where the file system allows, which nothing
//! can leave behind; this covers the named fallback (`sealfs_builder::remove_unfinished_outputs`).
//! The signals are blocked in every thread (all are started after this) and taken by one thread
//! with `sigwait`, so the cleanup runs as ordinary code, not in a signal handler (as `mount`
//! does). A signal the process was started with ignored (`nohup`, a background job's `SIGINT`)
//! stays ignored.

#![allow(
    unsafe_code,
    reason = "sigaction, pthread_sigmask, sigwait and raise, which std does not offer"
)]

/// Starts the thread that removes unfinished outputs on `SIGINT`, `SIGTERM` or `SIGHUP` and then
/// ends the process by that signal. Call it before any other thread starts.
pub fn remove_outputs_on_termination() {
    // SAFETY: sigset_t is plain data initialised by sigemptyset before use; a null new action
    // makes sigaction only read the current one into `old`, a valid `sigaction` (plain C data,
    // for which all zeroes is a valid value).
    let set = unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        let mut any = false;
        for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
            let mut old: libc::sigaction = std::mem::zeroed();
            let ignored = libc::sigaction(sig, std::ptr::null(), &mut old) == 0
                && old.sa_sigaction == libc::SIG_IGN;
            if !ignored {
                libc::sigaddset(&mut set, sig);
                any = true;
            }
        }
        if !any || libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) != 0 {
            return;
        }
        set
    };
    std::thread::spawn(move || {
        let mut sig: libc::c_int = 0;
        // SAFETY: `set` is an initialised sigset_t and `sig` a valid place for the answer.
        if unsafe { libc::sigwait(&set, &mut sig) } != 0 {
            return;
        }
        sealfs_builder::remove_unfinished_outputs();
        // The signal was taken by sigwait; raised again in this thread, unblocked, its default
        // action ends the process by it.
        // SAFETY: as above, a sigset_t initialised by sigemptyset; raise takes a signal number.
        unsafe {
            let mut one: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut one);
            libc::sigaddset(&mut one, sig);
            libc::pthread_sigmask(libc::SIG_UNBLOCK, &one, std::ptr::null_mut());
            libc::raise(sig);
        }
        std::process::exit(128 + sig);
    });
}
