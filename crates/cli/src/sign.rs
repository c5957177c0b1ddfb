//! `sealfs keygen`, `sealfs sign` and `sealfs statement`: Ed25519 keys and signed statements (the
//! engine is [`sealfs_trust`]; this parses, prints and picks exit codes).

use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use sealfs_trust::{PublicKey, SignError, SignTarget, Signature, SigningKey, Statement};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Arguments of `sealfs keygen`.
#[derive(Args)]
pub struct KeygenArgs {
    /// The private key file to write (PEM PKCS#8, mode 0600); the public key goes to `OUT.pub`
    /// (PEM SPKI). Neither may exist yet.
    out: PathBuf,
}

fn create_new(path: &Path, mode: u32, text: &str) -> Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path)
        .with_context(|| format!("{}: create", sealfs_text::escape_path(path)))?;
    f.write_all(text.as_bytes())
        .and_then(|_| f.sync_all())
        .with_context(|| format!("{}: write", sealfs_text::escape_path(path)))
}

/// Runs `sealfs keygen`: prints the new key's fingerprint.
pub fn run_keygen(args: KeygenArgs) -> Result<ExitCode> {
    let key = SigningKey::generate();
    let mut public = args.out.as_os_str().to_owned();
    public.push(".pub");
    let public = PathBuf::from(public);
    if public.exists() {
        bail!("{}: exists already", sealfs_text::escape_path(&public));
    }
    create_new(&args.out, 0o600, &key.to_pem())?;
    create_new(&public, 0o644, &key.public().to_pem())?;
    println!("{}", key.public().fingerprint());
    Ok(ExitCode::SUCCESS)
}

/// The optional statement fields.
#[derive(Args)]
pub struct StatementArgs {
    /// The image's seal is in this sidecar.
    #[arg(long, value_name = "PATH")]
    sidecar: Option<PathBuf>,
    /// A name for the image, in the statement.
    #[arg(long, value_name = "TEXT")]
    name: Option<String>,
    /// A version of the image, in the statement.
    #[arg(long, value_name = "TEXT")]
    version: Option<String>,
    /// Creation time in the statement, in seconds since the Unix epoch [default: none].
    #[arg(long, value_name = "SECS")]
    created: Option<u64>,
}

impl StatementArgs {
    fn statement(&self, image: &Path) -> Result<Statement, SignError> {
        let mut st = sealfs_trust::seal_statement(image, self.sidecar.as_deref())?;
        st.name = self.name.clone();
        st.version = self.version.clone();
        st.created = self.created;
        st.validate()
            .map_err(|e| SignError::Signature(e.to_string()))?;
        Ok(st)
    }
}

/// Arguments of `sealfs statement`.
#[derive(Args)]
pub struct StatementCmd {
    /// The sealed image.
    image: PathBuf,
    #[command(flatten)]
    fields: StatementArgs,
}

/// Exit code 1 for an image at fault (not sealed, damaged seal, a signature that does not fit).
fn sign_error(e: SignError) -> Result<ExitCode> {
    match e {
        SignError::Io { .. } => Err(anyhow!(e)),
        e => {
            eprintln!("sealfs: error: {}", sealfs_reader::ErrorChain(&e));
            Ok(ExitCode::from(1))
        }
    }
}

/// Runs `sealfs statement`: writes the statement `sign` would sign to stdout.
pub fn run_statement(args: StatementCmd) -> Result<ExitCode> {
    match args.fields.statement(&args.image) {
        Ok(st) => {
            std::io::stdout().write_all(&st.encode())?;
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => sign_error(e),
    }
}

/// Arguments of `sealfs sign`.
#[derive(Args)]
pub struct SignArgs {
    /// The sealed image.
    image: PathBuf,
    /// The private key (PEM PKCS#8, as `openssl genpkey -algorithm ed25519` writes it).
    #[arg(
        long,
        value_name = "KEY",
        required_unless_present = "signature_in",
        conflicts_with = "signature_in"
    )]
    key: Option<PathBuf>,
    /// Instead of signing: store this raw 64-byte Ed25519 signature, made elsewhere over the
    /// statement `sealfs statement` prints (with the same fields), by the key `--pubkey` names.
    #[arg(long, value_name = "SIG", requires = "pubkey")]
    signature_in: Option<PathBuf>,
    /// The public key of `--signature-in` (PEM SPKI).
    #[arg(long, value_name = "PUB", requires = "signature_in")]
    pubkey: Option<PathBuf>,
    #[command(flatten)]
    fields: StatementArgs,
    /// Write the signature to IMAGE.sig instead of the seal.
    #[arg(long)]
    detached: bool,
    /// Also write the signed statement bytes to this file.
    #[arg(long, value_name = "FILE")]
    statement_out: Option<PathBuf>,
    /// Also write the raw 64-byte signature to this file.
    #[arg(long, value_name = "FILE")]
    signature_out: Option<PathBuf>,
}

/// Runs `sealfs sign`: prints the image digest and the signer's fingerprint.
pub fn run_sign(args: SignArgs) -> Result<ExitCode> {
    let statement = match args.fields.statement(&args.image) {
        Ok(st) => st,
        Err(e) => return sign_error(e),
    };
    // A signature vouches for the bytes: check every block against the seal before signing it.
    let options = sealfs_reader::check::CheckOptions {
        sidecar: args.fields.sidecar.clone().map(Into::into),
        ..Default::default()
    };
    let report = sealfs_reader::check::check(
        &args.image,
        &options,
        &crate::progress::TermProgress::new(false),
    )
    .map_err(|e| anyhow!(e))?;
    if !report.is_verified() {
        for p in &report.problems {
            eprintln!("{}: {p}", sealfs_text::escape_path(&args.image));
        }
        eprintln!(
            "sealfs: error: {}: does not match its seal ({} problem(s)); not signed",
            sealfs_text::escape_path(&args.image),
            report.problems.len()
        );
        return Ok(ExitCode::from(1));
    }
    let target = SignTarget {
        image: args.image.clone(),
        sidecar: args.fields.sidecar.clone(),
        detached: args.detached,
    };
    let result = match (&args.key, &args.signature_in, &args.pubkey) {
        (Some(key), _, _) => {
            let key = SigningKey::read(key).map_err(|e| anyhow!("--key: {e}"))?;
            sealfs_trust::sign_image(&target, &key, &statement)
        }
        (None, Some(sig), Some(public)) => {
            let public = PublicKey::read(public).map_err(|e| anyhow!("--pubkey: {e}"))?;
            let bytes = std::fs::read(sig)
                .with_context(|| format!("{}: read", sealfs_text::escape_path(sig)))?;
            let signature: [u8; 64] = bytes.try_into().map_err(|b: Vec<u8>| {
                anyhow!(
                    "{}: {} bytes, not a raw 64-byte Ed25519 signature",
                    sealfs_text::escape_path(sig),
                    b.len()
                )
            })?;
            sealfs_trust::add_signature(
                &target,
                Signature {
                    public_key: public.to_bytes(),
                    statement: statement.encode(),
                    signature,
                },
            )
        }
        _ => bail!("give --key, or --signature-in with --pubkey"),
    };
    let signed = match result {
        Ok(s) => s,
        Err(e) => return sign_error(e),
    };
    if let Some(p) = &args.statement_out {
        std::fs::write(p, &signed.signature.statement)
            .with_context(|| format!("{}: write", sealfs_text::escape_path(p)))?;
    }
    if let Some(p) = &args.signature_out {
        std::fs::write(p, signed.signature.signature)
            .with_context(|| format!("{}: write", sealfs_text::escape_path(p)))?;
    }
    println!("{} signed by {}", signed.digest, signed.fingerprint);
    eprintln!(
        "sealfs: {}: {} signature(s)",
        sealfs_text::escape_path(&signed.written),
        signed.count
    );
    Ok(ExitCode::SUCCESS)
}
