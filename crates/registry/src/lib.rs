//! sealfs images in OCI registries: image references, credentials, manifests and indexes, blobs
//! read lazily by range or streamed whole with their digest checked, and push with signatures as
//! referrers.
//!
//! # Design
//!
//! - **A registry is one more source.** A sealfs image is an OCI artifact ([`manifest`] describes
//!   its layout): one blob holding the sealed image (or two, a plain EROFS image and its seal).
//!   Reading it lazily is [`Registry::blob_object`]: a [`sealfs_remote::RemoteObject`] over the blob,
//!   so the reads are the ones an `https://` image gets (batched with their Merkle hash blocks,
//!   coalesced, concurrent, retried, through the persistent cache of verified blocks), only the
//!   requests are `GET /v2/REPO/blobs/DIGEST` with `Range`. The registry adds one manifest round
//!   trip at open and nothing per read.
//! - **Pinned.** A tag is resolved once ([`locate`]): the manifest's digest is what the session
//!   reads from, its bytes checked against the digest the reference names (if it does) and the one
//!   the registry states. Blobs are content-addressed, so a tag moved meanwhile changes nothing
//!   for a mount; a blob deleted is an error naming it.
//! - **Trust.** A manifest found by tag is the registry's word: opening one needs a digest or a key,
//!   as an HTTP image does ([`open`]). A reference named by manifest digest
//!   (`oci://HOST/REPO@sha256:...`) fixes the manifest, hence the image digest it states: that is
//!   an expected digest like `--digest`. Signatures are found through the referrers.
//! - **Push** ([`push_image`]): HEAD first, then a cross-repository mount when asked, then an
//!   upload: monolithic up to the chunk size, else chunked and resumable after a dropped
//!   connection; then the manifest, then the signatures as a referrer artifact (the referrers API
//!   where the registry takes the `subject`, the `sha256-<hex>` tag otherwise).
//! - **Converted layers** ([`layers`]): `sealfs convert` pushes the sealed image of each layer
//!   of a container image (each a sealfs artifact of its own, by digest, signatures attached)
//!   and one referrer of the container image's manifest listing them by layer digest.
//! - **For builds from container images** (`sealfs build --oci`), the same client gives
//!   [`Registry::image_manifest`] (an index resolved for a [`manifest::PlatformSpec`]) and
//!   [`Registry::blob_reader`] (a layer streamed with its digest checked as it is read).
//!
//! # Which OCI client, and why
//!
//! `oci-client` 0.18 (the ORAS project's, formerly `oci-distribution`) was weighed against what is
//! needed, and does part of it well; it is used for that part:
//!
//! | needed | `oci-client` | here |
//! |---|---|---|
//! | token flow (`WWW-Authenticate`, token endpoint with or without credentials, cache until expiry) | yes | used (`Client::auth`, and its token cache for its own requests) |
//! | ranged blob reads that tell a 206 from a whole blob | yes (`pull_blob_stream_partial`) | used by the blob store under `RemoteObject` |
//! | whole blob streams | yes (`pull_blob_stream`, which hashes the blob itself) | own GET instead (one hash, on the manifest's connection): [`BlobReader`] checks size and digest (naming the blob), receives a large blob on a thread ahead of its reader, and resumes with `oci-client`'s ranged call |
//! | redirects to storage, credentials dropped | yes (reqwest drops `Authorization` on another host) | used; tested against docker-registry on S3 storage |
//! | referrers with the tag-schema fallback (read) | yes (`pull_referrers`) | used |
//! | manifests and indexes (types) | yes | used for parsing ([`manifest`]) |
//! | fetching a manifest checked against a pinned digest, the `Docker-Content-Digest` and the `Content-Type` | digest only, no `Content-Type` | own ([`Registry::manifest`]) |
//! | knowing whether a registry took a `subject` (`OCI-Subject`), writing the tag-schema index | no | own ([`Registry::attach`]) |
//! | uploads resumable after a dropped connection (ask the registry's offset, go on) | no: uploads from memory or a stream it cannot rewind | own ([`push`]) |
//! | HEAD before upload, cross-repository mount falling back to the upload it opens | partly (`mount_blob` treats a 202 as an error) | own |
//! | the challenge learned from the first 401 (no `GET /v2/` round trip) | no (asks `/v2/` before each token) | own ([`client`]) |
//!
//! Credentials from docker's `config.json` (and its credential helpers) are read by
//! `docker_credential`. `oci-spec` has the types but no client; `dkregistry` and `docker-registry`
//! are unmaintained and have no referrers; `containers-image-proxy` drives skopeo as a subprocess
//! and cannot read ranges. The crate brings reqwest 0.13 beside object_store's 0.12 (both on
//! rustls with `ring`; no aws-lc is built).
//!
//! # Reference scheme
//!
//! `oci://HOST[:PORT]/REPO[:TAG][@sha256:HEX]` over HTTPS, `oci+http://...` over plain HTTP
//! (named, never a fallback), `docker://` as `oci://` (see [`crate::reference`]).

pub mod auth;
mod blob;
pub mod client;
mod error;
pub mod layers;
pub mod manifest;
mod open;
pub mod pull;
pub mod push;
pub mod reference;

pub use auth::Credentials;
pub use blob::{BlobReader, PUMP_BYTES, PUMP_MIN_BYTES};
pub use client::{FetchedManifest, Registry, RegistryOptions};
pub use error::RegistryError;
pub use open::{locate, open, registry_error, Opened, RegistryImage, MAX_SIGNATURE_BYTES};
pub use pull::{pull, PullReport};
pub use push::{push_image, PushOptions, PushReport};
pub use reference::{is_image_ref, ImageRef, Transport};
