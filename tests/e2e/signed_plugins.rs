//! Signed plugins end to end: `custodian plugin keygen|sign|verify`, a
//! server with `[plugins] trusted_keys` refusing what is not signed by a
//! trusted key at start and on every swap, and recording the signer.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::serve::{plugins, rebuilt_takedown};
use crate::server::{Server, TOKEN};
use crate::support::{custodian, outcome, run};

fn text(path: &Path) -> &str {
    path.to_str().unwrap()
}

/// A new key pair in `dir`: (secret key file, public key).
fn keygen(dir: &Path, name: &str) -> (PathBuf, String) {
    let file = dir.join(format!("{name}.key"));
    let (code, stdout, stderr) = outcome(&run(&[
        "plugin",
        "keygen",
        "--output",
        text(&file),
        "--json",
    ]));
    assert_eq!(code, 0, "{stderr}");
    let printed: Value = serde_json::from_str(&stdout).unwrap();
    (file, printed["key"].as_str().unwrap().to_owned())
}

fn sign(plugin: &Path, key: &Path) {
    let (code, _, stderr) = outcome(&run(&["plugin", "sign", text(plugin), "--key", text(key)]));
    assert_eq!(code, 0, "{stderr}");
}

/// `custodian plugin swap` of the takedown world: (exit code, stderr).
fn swap(server: &Server, plugin: &Path) -> (i32, String) {
    let swapped = crate::serve::swap_with_cli(server, "takedown", plugin, &["--json"]);
    (
        swapped.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&swapped.stderr).into_owned(),
    )
}

fn takedown_signer(server: &Server) -> Value {
    crate::serve::plugin_field(server, "takedown", "signer")
}

#[test]
fn keygen_sign_and_verify_agree_and_the_secret_key_is_never_printed() {
    let dir = tempfile::tempdir().unwrap();
    let (key, public) = keygen(dir.path(), "release");
    assert!(public.starts_with("ed25519:"), "{public}");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(&key).unwrap().permissions().mode();
        assert_eq!(
            mode & 0o777,
            0o600,
            "the secret key is private to its owner"
        );
    }
    let secret: Value = serde_json::from_str(&std::fs::read_to_string(&key).unwrap()).unwrap();
    let secret = secret["secret"].as_str().unwrap().to_owned();
    let (code, _, stderr) = outcome(&run(&["plugin", "keygen", "--output", text(&key)]));
    assert_eq!(code, 2, "an existing key is never overwritten: {stderr}");

    let plugin = rebuilt_takedown(dir.path(), "signed");
    let signed = custodian()
        .args([
            "plugin",
            "sign",
            text(&plugin),
            "--key",
            text(&key),
            "--json",
        ])
        .output()
        .unwrap();
    assert!(signed.status.success());
    let printed = format!(
        "{}{}",
        String::from_utf8_lossy(&signed.stdout),
        String::from_utf8_lossy(&signed.stderr)
    );
    assert!(
        !printed.contains(&secret),
        "the secret key is never printed"
    );
    let sig = PathBuf::from(format!("{}.sig", plugin.display()));
    assert!(sig.exists());

    let (code, stdout, stderr) = outcome(&run(&[
        "plugin",
        "verify",
        text(&plugin),
        "--trusted-key",
        &public,
    ]));
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("a trusted key"), "{stdout}");
    let (_, stranger) = keygen(dir.path(), "stranger");
    let (code, _, stderr) = outcome(&run(&[
        "plugin",
        "verify",
        text(&plugin),
        "--trusted-key",
        &stranger,
    ]));
    assert_eq!(code, 1);
    assert!(stderr.contains("not among the trusted keys"), "{stderr}");
    // One byte changed, the signature no longer holds.
    let mut bytes = std::fs::read(&plugin).unwrap();
    *bytes.last_mut().unwrap() ^= 1;
    std::fs::write(&plugin, bytes).unwrap();
    let (code, _, stderr) = outcome(&run(&["plugin", "verify", text(&plugin)]));
    assert_eq!(code, 1);
    assert!(stderr.contains("does not verify"), "{stderr}");
    let (code, _, stderr) = outcome(&run(&[
        "plugin",
        "verify",
        text(&plugin),
        "--trusted-key",
        "nope",
    ]));
    assert_eq!(code, 2, "{stderr}");
}

#[test]
fn a_server_with_trusted_keys_refuses_to_start_with_an_unsigned_configured_plugin() {
    let dir = tempfile::tempdir().unwrap();
    let (key, public) = keygen(dir.path(), "release");
    let plugin = rebuilt_takedown(dir.path(), "configured");
    let config = dir.path().join("custodian.toml");
    std::fs::write(
        &config,
        format!(
            "[plugins]\ntrusted_keys = [\"{public}\"]\n[plugins.takedown]\npath = \"{}\"\n",
            plugin.display()
        ),
    )
    .unwrap();
    let mut child = custodian()
        .args(["serve", "--listen", "127.0.0.1:0", "--data"])
        .arg(dir.path().join("data"))
        .arg("--config")
        .arg(&config)
        .env("CUSTODIAN_TOKEN", TOKEN)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the server started with an unsigned plugin");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    assert_eq!(status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("is not signed"), "{stderr}");

    // Signed, it starts and says who signed what it runs.
    sign(&plugin, &key);
    let server = Server::start_with(&std::fs::read_to_string(&config).unwrap(), &[]);
    assert_eq!(takedown_signer(&server), public.as_str());
}

#[test]
fn a_swap_needs_a_signature_by_a_trusted_key_and_the_set_records_the_signer() {
    let dir = tempfile::tempdir().unwrap();
    let (key, public) = keygen(dir.path(), "release");
    let (stranger, _) = keygen(dir.path(), "stranger");
    let server = Server::start_with(&format!("[plugins]\ntrusted_keys = [\"{public}\"]\n"), &[]);
    assert_eq!(
        takedown_signer(&server),
        Value::Null,
        "the bundled plugin needs no signature"
    );
    let before = plugins(&server);

    let unsigned = rebuilt_takedown(dir.path(), "unsigned");
    let (code, stderr) = swap(&server, &unsigned);
    assert_eq!(code, 2, "refused: the plugin's fault: {stderr}");
    assert!(stderr.contains("is not signed"), "{stderr}");

    let by_stranger = rebuilt_takedown(dir.path(), "stranger");
    sign(&by_stranger, &stranger);
    let (code, stderr) = swap(&server, &by_stranger);
    assert_eq!(code, 2, "refused: the plugin's fault: {stderr}");
    assert!(stderr.contains("not among the trusted keys"), "{stderr}");

    // A signature moved to other bytes does not verify.
    let moved = rebuilt_takedown(dir.path(), "moved");
    let signed = rebuilt_takedown(dir.path(), "signed");
    sign(&signed, &key);
    std::fs::copy(
        format!("{}.sig", signed.display()),
        format!("{}.sig", moved.display()),
    )
    .unwrap();
    let (code, stderr) = swap(&server, &moved);
    assert_eq!(code, 2, "refused: the plugin's fault: {stderr}");
    assert!(stderr.contains("does not verify"), "{stderr}");
    assert_eq!(
        plugins(&server)["plugins"],
        before["plugins"],
        "nothing was swapped"
    );

    let (code, stderr) = swap(&server, &signed);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(takedown_signer(&server), public.as_str());
    let shared = plugins(&server);
    assert_eq!(
        shared["plugins"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["world"] == "takedown")
            .unwrap()["signer"],
        public.as_str()
    );
    let log = server.log();
    let secret: Value = serde_json::from_str(&std::fs::read_to_string(&key).unwrap()).unwrap();
    assert!(!log.contains(secret["secret"].as_str().unwrap()));
}
