//! A containerd snapshotter whose committed layers are sealed EROFS images.
//!
//! containerd applies each layer's tar diff into an active snapshot this snapshotter hands it (a
//! directory, under an overlayfs mount over the layers below); [`Snapshotter::commit`] seals that
//! directory into an EROFS image with the builder, overlay whiteouts (0:0 character devices,
//! `trusted.overlay.opaque`) kept as they are, so the images stack under overlayfs as
//! `sealfs build --oci-layer` images do. Committed layers are mounted read-only, every block
//! verified against the digest recorded at commit: by the kernel (EROFS on dm-verity) where the
//! machine allows it, else by the verified FUSE mount ([`layer`]). The metadata lives in one
//! transactional store ([`store`]); the lifecycle follows containerd's `snapshots/overlay`
//! ([`service`]); [`serve`] answers containerd's snapshots API (gRPC, through the
//! `containerd-snapshots` crate) on a unix socket, as a proxy plugin, and what it holds
//! ([`status`]) on a second one; `List` takes containerd's filters ([`filter`]). Where
//! containerd lets a proxy plugin be its differ (1.7 and 2.x), [`differ`] builds each layer's
//! image straight from its tar stream instead, and the commit takes it as it is. A layer whose
//! sealed counterpart `sealfs convert` attached to the image is not pulled at all: [`lazy`]
//! commits it at once, read from the registry block by block, verified (containerd's
//! remote-snapshotter protocol).

pub mod differ;
pub mod error;
pub mod filter;
pub mod layer;
pub mod lazy;
pub mod service;
pub mod status;
pub mod store;

pub use error::{Error, Result};
pub use service::{Service, Snapshotter};

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::Arc;

/// Serves the snapshotter with state under `root` on the unix socket `address` until SIGINT or
/// SIGTERM, then unmounts its layers. A socket file left at `address` by a previous run is
/// replaced; the new one is readable and writable by its owner only. Its status is served on
/// `ROOT/status.sock` ([`status`]) the same way. The same socket serves containerd's diff
/// service ([`differ`]), which reads layers from the content store of the containerd at
/// `containerd` (its socket).
/// Committed layers are mounted the way `layer_mount` says ([`layer::Policy`]); layers with a
/// sealed counterpart are used lazily as `lazy` says ([`lazy::LazyConfig`]).
pub fn serve(
    root: &Path,
    address: &Path,
    containerd: &Path,
    layer_mount: layer::Policy,
    lazy: lazy::LazyConfig,
) -> Result<()> {
    let snapshotter = Arc::new(Snapshotter::open_with(root, layer_mount, lazy)?);
    let status_socket = status::socket_path(snapshotter.root());
    let status_listener = bind_owner_only(&status_socket)?;
    {
        let snapshotter = snapshotter.clone();
        std::thread::spawn(move || {
            for conn in status_listener.incoming().flatten() {
                status::answer(conn, &snapshotter.status());
            }
        });
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(Error::io(address))?;
    let served = runtime.block_on(async {
        if let Some(dir) = address.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(Error::io(dir))?;
        }
        match std::fs::remove_file(address) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(Error::io(address)(e))
            }
            _ => {}
        }
        let listener = tokio::net::UnixListener::bind(address).map_err(Error::io(address))?;
        std::fs::set_permissions(address, std::fs::Permissions::from_mode(0o600))
            .map_err(Error::io(address))?;
        let shutdown = async {
            use tokio::signal::unix::{signal, SignalKind};
            match (
                signal(SignalKind::terminate()),
                signal(SignalKind::interrupt()),
            ) {
                (Ok(mut term), Ok(mut int)) => {
                    tokio::select! {
                        _ = term.recv() => {}
                        _ = int.recv() => {}
                    }
                }
                _ => std::future::pending::<()>().await,
            }
        };
        containerd_snapshots::tonic::transport::Server::builder()
            .add_service(containerd_snapshots::server(Arc::new(Service(
                snapshotter.clone(),
            ))))
            .add_service(differ::server(snapshotter.clone(), containerd))
            .serve_with_incoming_shutdown(
                tokio_stream::wrappers::UnixListenerStream::new(listener),
                shutdown,
            )
            .await
            .map_err(|e| Error::io(address)(std::io::Error::other(e)))
    });
    snapshotter.unmount_all();
    let _ = std::fs::remove_file(address);
    let _ = std::fs::remove_file(&status_socket);
    served
}

/// A unix socket listening on `path` (a socket file left there replaced), owner only.
fn bind_owner_only(path: &Path) -> Result<std::os::unix::net::UnixListener> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(Error::io(path)(e)),
        _ => {}
    }
    let listener = std::os::unix::net::UnixListener::bind(path).map_err(Error::io(path))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
        .map_err(Error::io(path))?;
    Ok(listener)
}
