//! Importers: inputs other than a directory, as sources ([`sealfs_builder::Source`]) for the
//! builder, so that the same tree gives the same image whatever form it came in.
//!
//! - [`tar`]: ustar, GNU and PAX archives, plain or compressed, in one streaming pass
//!   ([`TarSource`]);
//! - [`oci`]: OCI images (an image layout on disk, or any [`oci::Blobs`] store): the layers
//!   flattened into one tree, or one image per layer with overlayfs whiteouts;
//! - [`squashfs`]: SquashFS 4.0 images, every compressor squashfs-tools writes, read in place
//!   ([`SquashfsSource`]).
//!
//! An importer implements the two phases of [`sealfs_builder::Source`]: `scan` reads the input
//! once and hands its entries to the builder's [`sealfs_builder::Sink`] (which applies `tar -x`'s
//! rules, and OCI's whiteouts through `Sink::next_layer`, `Sink::remove` and
//! `Sink::make_opaque`), keeping file data where it can be read again (in place in a seekable
//! input, or in a temporary file beside the output from `ScanContext::temp_file`); `open` reads
//! a file's data back by the handle the scan gave, from several threads.

mod acl;
mod error;
mod holes;
pub mod oci;
pub mod squashfs;
pub mod tar;

pub use error::{At, OciError, SquashfsError, TarError};
pub use oci::{layout::OciLayout, Blobs, OciImage};
pub use squashfs::SquashfsSource;
pub use tar::{Compression, EntryHook, Layer, TarSource};
