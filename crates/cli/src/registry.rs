//! `sealfs push IMAGE REF` and `sealfs pull REF OUT`: images in OCI registries (the engine is
//! `sealfs-registry`; this maps flags and prints).

use crate::open::{ImageArgs, TlsArgs};
use crate::progress::TermProgress;
use anyhow::{anyhow, Result};
use clap::Args;
use sealfs_registry::push::{BlobOutcome, ReferrersVia};
use sealfs_registry::{ImageRef, PushOptions, RegistryError};
use std::path::PathBuf;
use std::process::ExitCode;

/// Arguments of `sealfs push`.
#[derive(Args)]
pub struct PushArgs {
    /// The sealed image to push (a path).
    image: PathBuf,
    /// Where: `oci://HOST[:PORT]/REPO[:TAG]` (HTTPS; `oci+http://` for plain HTTP; tag `latest` if
    /// none). Credentials: SEALFS_REGISTRY_USERNAME and SEALFS_REGISTRY_PASSWORD, the file
    /// REGISTRY_AUTH_FILE names, or docker's config.json.
    reference: String,
    /// The seal sidecar of a detached image (pushed as the artifact's second layer).
    #[arg(long, value_name = "PATH")]
    sidecar: Option<PathBuf>,
    /// A repository of the same registry to mount blobs from when this one lacks them (no upload);
    /// repeatable.
    #[arg(long, value_name = "REPO")]
    mount_from: Vec<String>,
    /// Do not attach the image's signatures (its seal and IMAGE.sig) as a referrer.
    #[arg(long)]
    no_signatures: bool,
    /// Blobs up to this size are uploaded in one request, larger ones in chunks of it (each
    /// resumable after a dropped connection).
    #[arg(long, value_name = "BYTES", default_value_t = sealfs_registry::client::DEFAULT_CHUNK_SIZE)]
    chunk_size: u64,
    #[command(flatten)]
    tls: TlsArgs,
    /// Print the result as JSON.
    #[arg(long)]
    json: bool,
}

/// The exit code for a registry error: 1 when the registry served content other than what names
/// it, else 2.
fn registry_exit(e: &RegistryError) -> ExitCode {
    ExitCode::from(if e.is_content_fault() { 1 } else { 2 })
}

/// Runs `sealfs push`.
pub fn run_push(args: PushArgs) -> Result<ExitCode> {
    let target: ImageRef = args.reference.parse()?;
    let options = sealfs_registry::RegistryOptions {
        chunk_size: args.chunk_size.max(1),
        ..args.tls.registry_options()
    };
    let push = PushOptions {
        sidecar: args.sidecar.clone(),
        mount_from: args.mount_from.clone(),
        no_signatures: args.no_signatures,
    };
    let progress = TermProgress::new(args.json);
    let report = match sealfs_registry::push_image(&args.image, &target, &options, &push, &progress)
    {
        Ok(r) => r,
        Err(e) => {
            // With its causes (an image that fails to open says why), each said once.
            eprintln!("sealfs: error: {}", sealfs_reader::ErrorChain(&e));
            return Ok(registry_exit(&e));
        }
    };
    let outcome = |o: &BlobOutcome| match o {
        BlobOutcome::Present => "present".to_string(),
        BlobOutcome::Mounted { from } => format!("mounted from {from}"),
        BlobOutcome::Uploaded {
            requests,
            resumed,
            restarted,
        } => format!("uploaded ({requests} requests, {resumed} resumed, {restarted} restarted)"),
    };
    if args.json {
        let v = serde_json::json!({
            "reference": report.reference.to_string(),
            "manifest_digest": report.manifest_digest,
            "image_digest": report.facts.digest.to_string(),
            "blobs": report.blobs.iter().map(|b| serde_json::json!({
                "media_type": b.descriptor.media_type,
                "digest": b.descriptor.digest,
                "size": b.descriptor.size,
                "outcome": outcome(&b.outcome),
            })).collect::<Vec<_>>(),
            "signatures": report.signatures.as_ref().map(|s| serde_json::json!({
                "manifest_digest": s.manifest_digest,
                "count": s.count,
                "referrers": match &s.via { ReferrersVia::Api => "api".to_string(), ReferrersVia::Tag(t) => format!("tag {t}") },
            })),
        });
        println!("{v}");
        return Ok(ExitCode::SUCCESS);
    }
    for b in &report.blobs {
        eprintln!(
            "sealfs: {} {} ({} bytes): {}",
            b.descriptor.media_type,
            b.descriptor.digest,
            b.descriptor.size,
            outcome(&b.outcome)
        );
    }
    if let Some(s) = &report.signatures {
        eprintln!(
            "sealfs: {} signature(s) attached as {} ({})",
            s.count,
            s.manifest_digest,
            match &s.via {
                ReferrersVia::Api => "referrers API".to_string(),
                ReferrersVia::Tag(t) => format!("no referrers API: listed under the tag {t}"),
            }
        );
    }
    println!("{} {}", report.reference, report.facts.digest);
    Ok(ExitCode::SUCCESS)
}

/// Arguments of `sealfs pull`.
#[derive(Args)]
pub struct PullArgs {
    #[command(flatten)]
    image: ImageArgs,
    /// Where to write the image (it appears only once every block is verified).
    out: PathBuf,
    /// Where to write the seal of a detached image.
    #[arg(long = "sidecar-out", value_name = "PATH")]
    sidecar_out: Option<PathBuf>,
}

/// Runs `sealfs pull`.
pub fn run_pull(args: PullArgs) -> Result<ExitCode> {
    if args.image.registry_ref().is_none() {
        return Err(anyhow!(
            "{}: `sealfs pull` reads an image in a registry (oci://HOST/REPO:TAG)",
            sealfs_text::escape_path(&args.image.image)
        ));
    }
    args.image.refuse_double()?;
    let (opened, _, located) = args.image.open_located()?;
    let found = located.ok_or_else(|| anyhow!("not in a registry"))?;
    // The file is checked against what the open established: the expected digest (given, or
    // brought by a pinned reference), or the keys, the signatures found and the version floor.
    let used = &found.options;
    let check = sealfs_reader::check::CheckOptions {
        digest: used.digest,
        keys: used.keys.clone(),
        signatures: used.signatures.clone(),
        min_version: used.min_version.clone(),
        sidecar: None,
        max_problems: 20,
    };
    let progress = TermProgress::new(false);
    match sealfs_registry::pull(
        &opened,
        &found,
        &args.out,
        args.sidecar_out.as_deref(),
        check,
        &progress,
    ) {
        Ok(report) => {
            println!(
                "{} {} ({} bytes, {})",
                sealfs_text::escape_path(&report.out),
                report.check.digest.map_or("-".into(), |d| d.to_string()),
                report.bytes,
                opened.trust
            );
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            eprintln!("sealfs: error: {e}");
            Ok(registry_exit(&e))
        }
    }
}
