//! fs-verity Merkle trees, descriptors and digests, byte-identical to the
//! Linux kernel's and fsverity-utils' (`fsverity digest`).
//!
//! # The format in brief
//!
//! Data is cut into blocks of [`Params::block_size`] bytes (the last one
//! zero-padded). Every block is hashed as `H(salt' ‖ block)`, where `salt'`
//! is the salt zero-padded to the hash's compression block size (64 bytes
//! for SHA-256, 128 for SHA-512), or nothing when there is no salt. The
//! hashes of level 0 (one per data block) are packed into tree blocks, those
//! blocks are hashed into level 1, and so on until one block remains; its
//! hash is the **Merkle root**. The tree is stored top level first.
//! Empty data has an all-zero root and no tree; one block of data has no
//! tree and its hash is the root.
//!
//! The **file digest** (what `fsverity digest` prints, what
//! `FS_IOC_MEASURE_VERITY` returns, and what names a sealfs image) is the
//! unsalted hash of the 256-byte [`Descriptor`], which binds the algorithm,
//! block size, salt, data size and root.
//!
//! With SHA-256, no salt and data that is a whole number of blocks, the tree
//! and root are also what `veritysetup format --no-superblock --salt=-`
//! produces for dm-verity.
//!
//! # Pieces
//!
//! - [`HashAlg`], [`Params`]: validated parameters (SHA-256 or SHA-512;
//!   power-of-two block size from 1 KiB to 64 KiB and ≥ 2 digests; salt of
//!   at most 32 bytes). Bad parameters are [`Error`]s, never panics.
//! - [`BlockHasher`]: the prepared salted hash state; hashes blocks, shared
//!   by reference between threads.
//! - [`TreeGeometry`]: levels, blocks per level, where each level starts in
//!   stored order and where any hash lives ([`TreeGeometry::hash_location`]),
//!   plus the hash blocks a range of data blocks needs
//!   ([`TreeGeometry::hash_blocks_for`]): everything a lazily verifying
//!   reader needs.
//! - [`Tree`]: building. [`build_tree`] (in memory), [`build_tree_from_file`]
//!   (positional reads), [`TreeBuilder`] (streaming) and
//!   [`Tree::from_leaf_hashes`] (for callers that hash data blocks
//!   themselves, or got them from [`leaf_hashes_from_file`]). Level 0, nearly
//!   all the work, is hashed in parallel with rayon on the current pool; the
//!   output never depends on thread count. [`RootHasher`]: the root and file
//!   digest alone, streamed, in a few KiB whatever the size, runs of zeros
//!   (holes) in logarithmic time.
//! - [`check_tree`]: checks a whole stored tree against the root and the data
//!   blocks' hashes against it, reporting each damaged block once as a
//!   [`TreeProblem`] (indices in verity blocks; byte ranges from
//!   [`TreeProblem::byte_range`]). Lazy readers check single paths with
//!   [`TreeGeometry::hash_location`] and [`TreeGeometry::stored_digest`].
//! - [`Descriptor`], [`descriptor`], [`file_digest`]: the 256-byte
//!   `fsverity_descriptor` and the file digest.
//! - [`Digest`]: displays and parses as `sha256:<hex>` / `sha512:<hex>`.
//!
//! ```
//! use sealfs_verity::{build_tree, HashAlg, Params};
//!
//! let params = Params::new(HashAlg::Sha256, 4096, b"")?;
//! let tree = build_tree(&params, b"a")?;
//! assert_eq!(
//!     tree.digest().to_string(),
//!     "sha256:bce75948b9e7510293f8f2720412af9697c1479281323f3f220623fb8e94b557"
//! );
//! # Ok::<(), sealfs_verity::Error>(())
//! ```
//!
//! # Hash implementation
//!
//! SHA-256 and SHA-512 come from the `sha2` crate (pure Rust, SHA-NI /
//! ARMv8 SHA2 instructions selected at run time). `ring`, `openssl` and
//! `aws-lc-rs` were measured alongside it and were no faster for 4 KiB
//! salted blocks. On x86-64 CPUs with SHA-NI, SHA-256 over whole blocks
//! additionally goes through a small 2-way interleaved kernel of our own
//! (the idea of Linux 6.18's `sha256_finup_2x()`), about 30 % faster per
//! core here; it is checked against `sha2` and the oracles in the tests.
//! Figures in `BENCH.md`, programs in `examples/sha_bench.rs` and
//! `sha-bench/`.

mod check;
mod descriptor;
mod digest;
mod error;
mod geometry;
mod hasher;
mod params;
mod root;
mod seal;
#[cfg(target_arch = "x86_64")]
mod sha256x2;
mod tree;

pub use check::{authentic_leaves, check_tree, TreeProblem};
pub use descriptor::{descriptor, file_digest, Descriptor, DESCRIPTOR_SIZE};
pub use digest::{Digest, HashAlg, MAX_DIGEST_SIZE};
pub use error::{Error, Result};
pub use geometry::{HashLocation, TreeGeometry, KERNEL_MAX_LEVELS};
pub use hasher::BlockHasher;
pub use params::{Params, DEFAULT_BLOCK_SIZE, MAX_BLOCK_SIZE, MAX_SALT_SIZE, MIN_BLOCK_SIZE};
pub use root::RootHasher;
pub use seal::seal_params;
pub use tree::{build_tree, write_tree_from_leaves, Tree, TreeBuilder};
#[cfg(unix)]
pub use tree::{build_tree_from_file, leaf_hashes_from_file, leaf_hashes_from_reader};
