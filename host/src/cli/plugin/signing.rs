//! `custodian plugin keygen|sign|verify`: ed25519 keys and signatures for
//! plugins (see `custodian_runtime::signature`).

use std::io::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context, anyhow};
use clap::Args;
use custodian::runtime::content_hash;
use custodian::runtime::signature::{self, SecretKey, Signature, Trust};
use serde_json::json;

use crate::cli::{Failure, Outcome};

/// `custodian plugin keygen`'s arguments.
#[derive(Debug, Args)]
pub struct KeygenArgs {
    /// Where to write the secret key (created with mode 0600; an existing
    /// file is never overwritten).
    #[arg(long, short, value_name = "FILE")]
    pub output: PathBuf,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

/// `custodian plugin sign`'s arguments.
#[derive(Debug, Args)]
pub struct SignArgs {
    /// The `.wasm` file to sign.
    pub plugin: PathBuf,
    /// The secret key file `custodian plugin keygen` wrote.
    #[arg(long, value_name = "FILE")]
    pub key: PathBuf,
    /// Where to write the signature [default: PLUGIN.sig, where hosts
    /// and `custodian plugin swap` look for it].
    #[arg(long, short, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

/// `custodian plugin verify`'s arguments.
#[derive(Debug, Args)]
pub struct VerifyArgs {
    /// The `.wasm` file.
    pub plugin: PathBuf,
    /// Its signature [default: PLUGIN.sig].
    #[arg(long, value_name = "FILE")]
    pub signature: Option<PathBuf>,
    /// A public key to trust (`ed25519:BASE64`; repeatable). Without any,
    /// the signature is checked against the key it names.
    #[arg(long = "trusted-key", value_name = "KEY")]
    pub trusted_keys: Vec<String>,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

/// The signature a command sends or checks with `plugin`: the file
/// `explicit` names, which must exist, else `PLUGIN.sig` when it exists.
pub(crate) fn signature_for(
    plugin: &Path,
    explicit: Option<&Path>,
) -> Result<Option<Signature>, Failure> {
    let path = explicit.map_or_else(|| signature::path_beside(plugin), Path::to_path_buf);
    let found = signature::read_file(&path).map_err(|e| Failure::Usage(e.into()))?;
    if found.is_none() && explicit.is_some() {
        return Err(Failure::Usage(anyhow!(
            "cannot read the signature {}: no such file",
            path.display()
        )));
    }
    Ok(found)
}

pub(super) fn keygen(args: &KeygenArgs) -> Outcome {
    let key = SecretKey::generate().map_err(|e| Failure::Failed(e.into()))?;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut file = options
        .open(&args.output)
        .with_context(|| format!("cannot create {}", args.output.display()))
        .map_err(Failure::Usage)?;
    file.write_all(key.to_file().as_bytes())
        .and_then(|()| file.sync_all())
        .with_context(|| format!("cannot write {}", args.output.display()))
        .map_err(Failure::Failed)?;
    let public = key.public().to_string();
    if args.json {
        println!(
            "{}",
            json!({"key": public, "secret_key_file": args.output.display().to_string()})
        );
    } else {
        println!("{public}");
        eprintln!(
            "the secret key is in {} (keep it private); trust the public key above with\n  \
             [plugins]\n  trusted_keys = [\"{public}\"]",
            args.output.display()
        );
    }
    Ok(())
}

pub(super) fn sign(args: &SignArgs) -> Outcome {
    let text = std::fs::read_to_string(&args.key)
        .with_context(|| format!("cannot read the key {}", args.key.display()))
        .map_err(Failure::Usage)?;
    let key = SecretKey::from_file(&text)
        .with_context(|| format!("{} is not a usable key", args.key.display()))
        .map_err(Failure::Usage)?;
    let bytes = std::fs::read(&args.plugin)
        .with_context(|| format!("cannot read {}", args.plugin.display()))
        .map_err(Failure::Usage)?;
    let signature = key.sign(&content_hash(&bytes));
    let output = args
        .output
        .clone()
        .unwrap_or_else(|| signature::path_beside(&args.plugin));
    std::fs::write(&output, signature.to_json() + "\n")
        .with_context(|| format!("cannot write {}", output.display()))
        .map_err(Failure::Failed)?;
    if args.json {
        println!(
            "{}",
            json!({
                "plugin": signature.plugin,
                "key": signature.key,
                "signature_file": output.display().to_string(),
            })
        );
    } else {
        println!(
            "signed {} ({}) with {}\nsignature: {}",
            args.plugin.display(),
            signature.plugin,
            signature.key,
            output.display()
        );
    }
    Ok(())
}

pub(super) fn verify(args: &VerifyArgs) -> Outcome {
    let bytes = std::fs::read(&args.plugin)
        .with_context(|| format!("cannot read {}", args.plugin.display()))
        .map_err(Failure::Usage)?;
    let signature = signature_for(&args.plugin, args.signature.as_deref())?.ok_or_else(|| {
        Failure::Usage(anyhow!(
            "{} is not signed: no {} beside it (`custodian plugin sign` writes one)",
            args.plugin.display(),
            signature::path_beside(&args.plugin).display()
        ))
    })?;
    let trust = Trust::new(&args.trusted_keys).map_err(|e| Failure::Usage(e.into()))?;
    let name = args.plugin.display().to_string();
    let admitted = trust
        .admit(&content_hash(&bytes), &name, Some(&signature), false)
        .map_err(|e| Failure::Failed(anyhow!(e)))?;
    let signer = admitted.map(|s| s.key).unwrap_or_default();
    if args.json {
        println!(
            "{}",
            json!({"plugin": signature.plugin, "key": signer, "trusted": trust.requires_signatures()})
        );
    } else if trust.requires_signatures() {
        println!("{name}: signed by {signer}, a trusted key");
    } else {
        println!("{name}: signed by {signer} (no --trusted-key given: who signed is not judged)");
    }
    Ok(())
}
