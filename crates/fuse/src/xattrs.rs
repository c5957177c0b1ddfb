//! Extended attribute answers: always, never (the kernel then answers without asking), or once
//! a background read of every inode finds the image carries none.

use crate::SealFs;
use std::sync::atomic::Ordering;

/// How a mount answers extended attribute requests (`sealfs mount --xattrs`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum XattrMode {
    /// Every `getxattr` and `listxattr` is answered from the image.
    On,
    /// The mount shows no extended attributes: the first request is answered `ENOSYS`, after
    /// which the kernel answers every one itself (`EOPNOTSUPP`) without a round trip. An `ls -l`
    /// asks two per file (`security.selinux`, `system.posix_acl_access`).
    Off,
    /// [`XattrMode::Off`] once the image is found to carry none, by a read of every inode in the
    /// background after mounting; [`XattrMode::On`] until then, and for good if it carries some
    /// or cannot be read whole.
    #[default]
    Auto,
}

/// Where a mount's extended attribute answers stand.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum XattrState {
    Answered = 0,
    Scanning = 1,
    NoneInImage = 2,
    Hidden = 3,
}

impl XattrState {
    fn of(v: u8) -> Self {
        match v {
            1 => Self::Scanning,
            2 => Self::NoneInImage,
            3 => Self::Hidden,
            _ => Self::Answered,
        }
    }

    /// Whether requests are answered `ENOSYS` (the kernel then stops sending them).
    pub(crate) fn refused(self) -> bool {
        matches!(self, Self::NoneInImage | Self::Hidden)
    }

    pub(crate) fn describe(self) -> &'static str {
        match self {
            Self::Answered => "answered from the image",
            Self::Scanning => "answered from the image while checking whether it has any",
            Self::NoneInImage => "none in the image: the kernel answers without asking",
            Self::Hidden => "hidden (--xattrs=off): the kernel answers without asking",
        }
    }
}

impl SealFs {
    /// Sets how extended attribute requests are answered. [`XattrMode::Auto`] starts its check of
    /// the image on a thread of its own: call this in the process that serves.
    pub fn with_xattrs(self, mode: XattrMode) -> SealFs {
        self.with_xattrs_after(mode, || None)
    }

    /// [`SealFs::with_xattrs`], the check of [`XattrMode::Auto`] starting once `before` has run
    /// on its thread (a remote image's metadata fetched ahead into the cache, which the check
    /// then reads without a request). When `before` answers the check itself (what
    /// [`sealfs_reader::Image::warm_metadata`] returns), the image is not read again.
    pub fn with_xattrs_after(
        self,
        mode: XattrMode,
        before: impl FnOnce() -> Option<bool> + Send + 'static,
    ) -> SealFs {
        let state = match mode {
            XattrMode::On => XattrState::Answered,
            XattrMode::Off => XattrState::Hidden,
            XattrMode::Auto => XattrState::Scanning,
        };
        self.xattrs.store(state as u8, Ordering::Relaxed);
        if mode == XattrMode::Auto {
            let (image, xattrs) = (self.image.clone(), self.xattrs.clone());
            let why = self.xattrs_unread.clone();
            std::thread::spawn(move || {
                let found = match before() {
                    Some(any) => Ok(any),
                    None => image.any_xattrs(),
                };
                if let Err(e) = &found {
                    *why.lock().unwrap_or_else(|e| e.into_inner()) =
                        Some(sealfs_reader::ErrorChain(e).to_string());
                }
                let state = match found {
                    Ok(false) => XattrState::NoneInImage,
                    _ => XattrState::Answered,
                };
                xattrs.store(state as u8, Ordering::Relaxed);
            });
        }
        self
    }

    pub(crate) fn xattr_state(&self) -> XattrState {
        XattrState::of(self.xattrs.load(Ordering::Relaxed))
    }
}
