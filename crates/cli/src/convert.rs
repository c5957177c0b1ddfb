//! `sealfs convert IMAGE`: every layer of a container image built into a sealed image, kept in a
//! directory and/or pushed beside the image as a referrer of its manifest (the engine is
//! `sealfs_import::oci::convert`; this maps flags and prints).

use crate::open::TlsArgs;
use crate::progress::TermProgress;
use anyhow::{anyhow, Result};
use clap::Args;
use sealfs_import::oci::convert::{self, ConvertError, ConvertOptions, ConvertReport};
use sealfs_registry::push::ReferrersVia;
use sealfs_registry::ImageRef;
use sealfs_text::escape as show;
use std::path::PathBuf;
use std::process::ExitCode;

/// Arguments of `sealfs convert`.
#[derive(Args)]
pub struct ConvertArgs {
    /// The container image: oci://HOST[:PORT]/REPO[:TAG][@DIGEST] (docker:// is the same;
    /// oci+http:// for plain HTTP), credentials as `sealfs push` finds them; or an OCI image
    /// layout, LAYOUT[:REF], as `sealfs build --oci` takes it.
    image: String,
    /// Only the image for this platform of an index, OS/ARCH[/VARIANT] [default: every
    /// platform's].
    #[arg(long, value_name = "PLATFORM")]
    platform: Option<String>,
    /// Push the sealed layers and attach their list to each image manifest as a referrer (to
    /// the image's own repository unless --to names another).
    #[arg(long)]
    push: bool,
    /// With --push: the repository to push to, oci://HOST[:PORT]/REPO (needed for a layout).
    #[arg(long, value_name = "REPO", requires = "push")]
    to: Option<String>,
    /// Keep the sealed layers in this directory (`sha256-<layer hex>.sealfs` each); needed
    /// without --push.
    #[arg(long, value_name = "DIR", required_unless_present = "push")]
    out: Option<PathBuf>,
    /// Sign each sealed layer's statement (naming the layer's digest) with this private key
    /// (PEM PKCS#8), into its seal; a push attaches the signatures.
    #[arg(long, value_name = "KEY")]
    key: Option<PathBuf>,
    /// With --key: the version each signed statement carries, what `sealfs snapshotter
    /// --lazy-min-version` and `verify --min-version` compare (dot-separated numbers).
    #[arg(long, value_name = "VERSION", requires = "key")]
    version: Option<String>,
    /// Build threads (default: one per CPU). The images do not depend on it.
    #[arg(short = 'j', long, value_name = "N", default_value_t = 0)]
    threads: usize,
    /// With --push: a prefetch list to put in the referrer (FILE: absolute paths in the
    /// container's root that its start reads, one a line, `#` comments; `-` for stdin; at most
    /// 64 KiB and 4096 paths). A lazy mount of each layer fetches what reading them needs first,
    /// in a few batches. Unsigned, a hint: see docs/security.md.
    #[arg(long, value_name = "FILE", requires = "push")]
    prefetch: Option<PathBuf>,
    #[command(flatten)]
    tls: TlsArgs,
    /// Print the result as JSON.
    #[arg(long)]
    json: bool,
    /// Print nothing but errors and the result.
    #[arg(short, long)]
    quiet: bool,
}

/// Runs `sealfs convert`.
pub fn run(args: ConvertArgs) -> Result<ExitCode> {
    let platform = args
        .platform
        .as_deref()
        .map(|p| p.parse().map_err(|e| anyhow!("--platform: {e}")))
        .transpose()?;
    let push = if args.push {
        let to = match (&args.to, sealfs_registry::is_image_ref(&args.image)) {
            (Some(to), _) => to.clone(),
            (None, true) => args.image.clone(),
            (None, false) => {
                return Err(anyhow!(
                    "{}: a layout has no repository to push to: name one with --to",
                    show(args.image.as_bytes())
                ))
            }
        };
        let r: ImageRef = to.parse()?;
        Some(r)
    } else {
        None
    };
    let key = args
        .key
        .as_deref()
        .map(|k| sealfs_trust::SigningKey::read(k).map_err(|e| anyhow!("--key: {e}")))
        .transpose()?;
    let options = ConvertOptions {
        platform,
        registry: args.tls.registry_options(),
        out_dir: args.out.clone(),
        push,
        key,
        version: args.version.clone(),
        threads: args.threads,
        prefetch: match &args.prefetch {
            Some(p) => crate::mount::read_prefetch_list(p).map_err(|e| e.context("--prefetch"))?,
            None => Vec::new(),
        },
    };
    let progress = TermProgress::new(args.quiet || args.json);
    let report = match convert::convert(&args.image, &options, &progress, &progress) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("sealfs: error: {}", sealfs_reader::ErrorChain(&e));
            let code = match &e {
                ConvertError::Usage(_) => 2,
                e if e.is_content_fault() => 1,
                _ => 2,
            };
            return Ok(ExitCode::from(code));
        }
    };
    if args.json {
        println!("{}", json(&report));
    } else {
        text(&report);
    }
    Ok(ExitCode::SUCCESS)
}

fn via(v: &ReferrersVia) -> String {
    match v {
        ReferrersVia::Api => "api".into(),
        ReferrersVia::Tag(t) => format!("tag {t}"),
    }
}

/// The report as one JSON object: per image, its manifest and referrer, per layer the
/// original digests and the sealed image's.
fn json(report: &ConvertReport) -> serde_json::Value {
    let images: Vec<serde_json::Value> = report
        .images
        .iter()
        .map(|im| {
            let layers: Vec<serde_json::Value> = im
                .layers
                .iter()
                .map(|l| {
                    let mut v = serde_json::json!({
                        "layer_digest": l.layer.digest.to_string(),
                        "layer_media_type": l.layer.media_type,
                        "layer_size": l.layer.size,
                        "diff_id": l.diff_id.to_string(),
                        "sealed_digest": l.facts.digest.to_string(),
                        "erofs_length": l.facts.erofs_length,
                        "bytes": l.bytes,
                        "signed": l.signed,
                        "pushed": l.pushed.as_ref().map(|p| serde_json::json!({
                            "reference": p.reference.to_string(),
                            "manifest_digest": p.manifest_digest,
                            "blob_digest": p.blob.digest,
                            "signatures": p.report.signatures.as_ref().map(|s| serde_json::json!({
                                "manifest_digest": s.manifest_digest,
                                "count": s.count,
                                "referrers": via(&s.via),
                            })),
                        })),
                    });
                    if let Some(path) = &l.path {
                        for (k, val) in sealfs_text::json_path("path", path) {
                            v[k] = val;
                        }
                    }
                    v
                })
                .collect();
            serde_json::json!({
                "name": im.name,
                "platform": im.platform.as_ref().map(|p| p.to_string()),
                "manifest_digest": im.manifest.digest.to_string(),
                "manifest_media_type": im.manifest.media_type,
                "layers": layers,
                "referrer": im.referrer.as_ref().map(|r| serde_json::json!({
                    "manifest_digest": r.digest,
                    "artifact_type": sealfs_registry::layers::LAYERS_TYPE,
                    "referrers": via(&r.via),
                })),
            })
        })
        .collect();
    serde_json::json!({ "images": images })
}

/// The report as text: per layer `LAYER-DIGEST SEALED-DIGEST [WHERE]` on stdout, the rest on
/// stderr.
fn text(report: &ConvertReport) {
    for im in &report.images {
        eprintln!(
            "sealfs: {} ({}, manifest {}): {} layer(s)",
            show(im.name.as_bytes()),
            im.platform
                .as_ref()
                .map_or("no platform".to_string(), |p| p.to_string()),
            im.manifest.digest,
            im.layers.len()
        );
        for l in &im.layers {
            let at = match (&l.pushed, &l.path) {
                (Some(p), _) => format!(" {}", p.reference),
                (None, Some(path)) => format!(" {}", sealfs_text::escape_path(path)),
                (None, None) => String::new(),
            };
            println!("{} {}{at}", l.layer.digest, l.facts.digest);
        }
        if let Some(r) = &im.referrer {
            eprintln!(
                "sealfs: referrer {} attached to {} ({})",
                r.digest,
                im.manifest.digest,
                match &r.via {
                    ReferrersVia::Api => "referrers API".to_string(),
                    ReferrersVia::Tag(t) => format!("no referrers API: listed under the tag {t}"),
                }
            );
        }
    }
}
