//! The server side of containerd's diff service (`containerd.services.diff.v1.Diff`), generated
//! from containerd's own `diff.proto` (vendored under `proto/`, as the `containerd-client` crate
//! ships it; that crate generates clients only). Its message types (`Descriptor`, `Mount`) are
//! `containerd-client`'s.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    tonic_build::configure()
        .build_client(false)
        .build_server(true)
        .extern_path(".containerd.types", "::containerd_client::types")
        .compile(
            &["proto/github.com/containerd/containerd/api/services/diff/v1/diff.proto"],
            &["proto"],
        )?;
    Ok(())
}
