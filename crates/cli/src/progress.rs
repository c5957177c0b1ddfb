//! Progress on a terminal (stderr), nothing when stderr is not a terminal.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use sealfs_builder::Progress;
use std::io::IsTerminal;
use std::sync::Mutex;

/// An indicatif-backed [`Progress`]; hidden when stderr is not a terminal or `quiet` is set.
pub struct TermProgress {
    enabled: bool,
    bar: Mutex<Option<ProgressBar>>,
}

impl TermProgress {
    pub fn new(quiet: bool) -> Self {
        Self {
            enabled: !quiet && std::io::stderr().is_terminal(),
            bar: Mutex::new(None),
        }
    }
}

impl Progress for TermProgress {
    fn begin(&self, step: &'static str, total: Option<u64>) {
        if !self.enabled {
            return;
        }
        let bar = match total {
            Some(t) => ProgressBar::new(t).with_style(
                ProgressStyle::with_template(
                    "{msg:>20} [{bar:40}] {bytes}/{total_bytes} {bytes_per_sec} eta {eta}",
                )
                .expect("valid template")
                .progress_chars("=> "),
            ),
            None => ProgressBar::new_spinner().with_style(
                ProgressStyle::with_template("{msg:>20} {spinner} {pos} entries")
                    .expect("valid template"),
            ),
        };
        bar.set_draw_target(ProgressDrawTarget::stderr_with_hz(10));
        bar.set_message(step);
        *self.bar.lock().unwrap() = Some(bar);
    }

    fn begin_bytes(&self, step: &'static str, total: Option<u64>) {
        if !self.enabled {
            return;
        }
        if total.is_some() {
            return self.begin(step, total);
        }
        let bar = ProgressBar::new_spinner().with_style(
            ProgressStyle::with_template("{msg:>20} {spinner} {bytes} {bytes_per_sec}")
                .expect("valid template"),
        );
        bar.set_draw_target(ProgressDrawTarget::stderr_with_hz(10));
        bar.set_message(step);
        *self.bar.lock().unwrap() = Some(bar);
    }

    fn advance(&self, n: u64) {
        if let Some(bar) = self.bar.lock().unwrap().as_ref() {
            bar.inc(n);
        }
    }

    fn end(&self) {
        if let Some(bar) = self.bar.lock().unwrap().take() {
            bar.finish_and_clear();
        }
    }
}

/// The read side (checking, extraction) has its own progress hook, as the builder does (the two
/// never depend on each other); the terminal shows both the same way.
macro_rules! forward_progress {
    ($($trait:path),*) => {$(
        impl $trait for TermProgress {
            fn begin(&self, step: &'static str, total: Option<u64>) {
                Progress::begin(self, step, total)
            }

            fn advance(&self, n: u64) {
                Progress::advance(self, n)
            }

            fn end(&self) {
                Progress::end(self)
            }
        }
    )*};
}

forward_progress!(sealfs_reader::check::Progress);
