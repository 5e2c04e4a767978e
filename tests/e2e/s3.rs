//! The S3 endpoint end to end: `custodian serve --s3-listen` on the
//! embedded default, driven by real, unmodified clients with their
//! default settings: boto3 and the AWS CLI (from the venv `.ci/run`
//! makes; `CUSTODIAN_S3_CLIENTS` names its `bin`) and rclone (Debian's,
//! on the `PATH`). Under `CI=true` a missing client fails these tests;
//! elsewhere they say so and pass.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};

use crate::server::{Server, agent, answer, bearer, json_body};

/// The directory holding the clients' `python` and `aws`, or `None`
/// (after saying why) when this is not CI and they are missing.
pub fn clients() -> Option<PathBuf> {
    let dir = std::env::var_os("CUSTODIAN_S3_CLIENTS").map(PathBuf::from);
    let found = dir.as_ref().filter(|dir| {
        Command::new(dir.join("python"))
            .args(["-c", "import boto3"])
            .output()
            .is_ok_and(|o| o.status.success())
            && dir.join("aws").exists()
    });
    if let Some(dir) = found {
        return Some(dir.clone());
    }
    let how = "point CUSTODIAN_S3_CLIENTS at the bin/ of a venv with \
               `pip install -r .ci/s3-clients-requirements.txt` (.ci/run makes one)";
    if std::env::var("CI").is_ok_and(|ci| ci == "true") {
        panic!("boto3 and the AWS CLI are missing: {how}");
    }
    eprintln!("notice: skipping the S3 client tests: boto3 and the AWS CLI are missing; {how}");
    None
}

/// A server with its S3 endpoint, and an S3 key of a principal with
/// `roles`: (server, access key id, secret).
pub fn serve_with_key(config: &str, roles: &[&str]) -> (Server, String, String) {
    let server = Server::start_with(config, &["--s3-listen", "127.0.0.1:0"]);
    let (access, secret) = s3_key(&server, "alice", roles);
    (server, access, secret)
}

/// Creates principal `name` with `roles` and issues it an S3 key.
fn s3_key(server: &Server, name: &str, roles: &[&str]) -> (String, String) {
    let (status, body) = answer(
        agent()
            .post(&server.url("/v1/principals"))
            .header("authorization", &bearer())
            .send(&json_body(json!({"name": name, "roles": roles}))[..]),
    );
    assert_eq!(status, 201, "{body}");
    let (status, body) = answer(
        agent()
            .post(&server.url(&format!("/v1/principals/{name}/s3-keys")))
            .header("authorization", &bearer())
            .send_empty(),
    );
    assert_eq!(status, 201, "{body}");
    let credential = &body["credential"];
    (
        credential["access_key_id"].as_str().unwrap().to_owned(),
        credential["secret_access_key"].as_str().unwrap().to_owned(),
    )
}

/// Runs boto3 `script` (Python; `s3` is a client of the endpoint with the
/// key, `err(f)` answers `[code, status]` of a `ClientError` or `None`,
/// and the script fills the dict `out`), returning `out`.
pub fn boto3(clients: &Path, endpoint: &str, access: &str, secret: &str, script: &str) -> Value {
    let prelude = r#"
import json, sys, urllib.request, hashlib, io
import boto3, botocore
from botocore.config import Config
endpoint, access, secret = sys.argv[1:4]
def client(key=access, secret=secret, **config):
    return boto3.client("s3", endpoint_url=endpoint, aws_access_key_id=key,
        aws_secret_access_key=secret, region_name="us-east-1",
        config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}, **config))
s3 = client()
def err(f):
    try:
        f()
        return None
    except botocore.exceptions.ClientError as e:
        return [e.response["Error"]["Code"], e.response["ResponseMetadata"]["HTTPStatusCode"]]
def open_put(path, length):
    """A signed PUT of `length` bytes (UNSIGNED-PAYLOAD) with its headers
    sent and no body yet: the script sends the body, or part of it."""
    import http.client, urllib.parse
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials
    request = AWSRequest(method="PUT", url=endpoint + path, data=b"",
                         headers={"x-amz-content-sha256": "UNSIGNED-PAYLOAD", "Content-Length": str(length)})
    SigV4Auth(Credentials(access, secret), "s3", "us-east-1").add_auth(request)
    host, port = urllib.parse.urlparse(endpoint).netloc.split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=10)
    connection.putrequest("PUT", path, skip_accept_encoding=True)
    for name, value in request.prepare().headers.items():
        connection.putheader(name, value)
    connection.endheaders()
    return connection
out = {}
"#;
    let program = format!("{prelude}\n{script}\nprint(json.dumps(out))\n");
    let output = Command::new(clients.join("python"))
        .args(["-c", &program, endpoint, access, secret])
        .output()
        .expect("python runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "boto3 failed:\n{}\n{stdout}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_str(stdout.lines().last().unwrap_or(""))
        .unwrap_or_else(|e| panic!("boto3 printed no result ({e}): {stdout}"))
}

#[test]
fn boto3_with_its_defaults_puts_reads_lists_copies_and_deletes_through_the_s3_endpoint() {
    let Some(clients) = clients() else { return };
    let (server, access, secret) = serve_with_key("", &["writer:store/serving"]);
    let endpoint = server.s3.clone().unwrap();
    let out = boto3(
        &clients,
        &endpoint,
        &access,
        &secret,
        r#"
key = "docs/a b+c&d.txt"
out["put"] = s3.put_object(Bucket="serving", Key=key, Body=b"hello world")["ETag"]
got = s3.get_object(Bucket="serving", Key=key)
out["get"] = got["Body"].read().decode()
out["etag_matches"] = got["ETag"] == out["put"]
out["range"] = s3.get_object(Bucket="serving", Key=key, Range="bytes=6-")["Body"].read().decode()
out["head"] = s3.head_object(Bucket="serving", Key=key)["ContentLength"]
out["create_again"] = err(lambda: s3.put_object(Bucket="serving", Key=key, Body=b"x", IfNoneMatch="*"))
# A body large enough to be streamed is refused by its condition as
# cleanly, before the store reads it.
out["create_again_big"] = err(lambda: s3.put_object(Bucket="serving", Key=key, Body=b"x" * (3 << 20), IfNoneMatch="*"))
out["stale_match"] = err(lambda: s3.put_object(Bucket="serving", Key=key, Body=b"x", IfMatch='"0123"'))
out["replace"] = s3.put_object(Bucket="serving", Key=key, Body=b"HELLO", IfMatch=out["put"])["ETag"] != out["put"]
# A single-part object's ETag is its MD5, in every answer that names it.
md5 = '"' + hashlib.md5(b"HELLO").hexdigest() + '"'
out["etag_is_md5"] = [s3.head_object(Bucket="serving", Key=key)["ETag"] == md5,
    s3.list_objects_v2(Bucket="serving", Prefix=key)["Contents"][0]["ETag"] == md5,
    out["put"] == '"' + hashlib.md5(b"hello world").hexdigest() + '"']
out["md5_match"] = s3.get_object(Bucket="serving", Key=key, IfMatch=md5)["Body"].read().decode()
out["md5_none_match"] = err(lambda: s3.get_object(Bucket="serving", Key=key, IfNoneMatch=md5))
out["old_md5_match"] = err(lambda: s3.put_object(Bucket="serving", Key=key, Body=b"x", IfMatch=out["put"]))
for i in range(5):
    s3.put_object(Bucket="serving", Key=f"docs/sub{i % 2}/f{i}", Body=b"x" * i)
listed = s3.list_objects_v2(Bucket="serving", Prefix="docs/", Delimiter="/")
out["keys"] = [c["Key"] for c in listed.get("Contents", [])]
out["prefixes"] = [p["Prefix"] for p in listed.get("CommonPrefixes", [])]
pages = s3.get_paginator("list_objects_v2").paginate(Bucket="serving", Prefix="docs/", PaginationConfig={"PageSize": 2})
out["paged"] = [c["Key"] for page in pages for c in page.get("Contents", [])]
v1 = s3.get_paginator("list_objects").paginate(Bucket="serving", Prefix="docs/", PaginationConfig={"PageSize": 2})
out["paged_v1"] = [c["Key"] for page in v1 for c in page.get("Contents", [])]
s3.copy_object(Bucket="serving", Key="docs/copy", CopySource={"Bucket": "serving", "Key": key})
out["copy"] = s3.get_object(Bucket="serving", Key="docs/copy")["Body"].read().decode()
s3.delete_object(Bucket="serving", Key="docs/copy")
out["deleted"] = err(lambda: s3.get_object(Bucket="serving", Key="docs/copy"))
# The Content-Type a write sends is kept and read back (not as user
# metadata), carried by a copy, and replaced with the metadata.
s3.put_object(Bucket="serving", Key="docs/table.csv", Body=b"a,b", ContentType="text/csv", Metadata={"m": "1"})
typed = s3.head_object(Bucket="serving", Key="docs/table.csv")
s3.copy_object(Bucket="serving", Key="docs/table-copy.csv", CopySource={"Bucket": "serving", "Key": "docs/table.csv"})
copied = s3.get_object(Bucket="serving", Key="docs/table-copy.csv")
s3.copy_object(Bucket="serving", Key="docs/table.txt", CopySource={"Bucket": "serving", "Key": "docs/table.csv"},
               MetadataDirective="REPLACE", ContentType="text/plain")
replaced = s3.head_object(Bucket="serving", Key="docs/table.txt")
out["content_types"] = [typed["ContentType"], typed["Metadata"], copied["ContentType"], replaced["ContentType"], replaced["Metadata"]]
out["untyped"] = s3.head_object(Bucket="serving", Key=key)["ContentType"]
for k in ["docs/table.csv", "docs/table-copy.csv", "docs/table.txt"]:
    s3.delete_object(Bucket="serving", Key=k)
batch = s3.delete_objects(Bucket="serving", Delete={"Objects": [{"Key": "docs/sub0/f0"}, {"Key": "docs/sub1/f1"}]})
out["batch"] = sorted(d["Key"] for d in batch.get("Deleted", []))
out["batch_errors"] = batch.get("Errors", [])
# boto3 presigns with Signature V2 unless told V4; V2 is refused (below).
v4 = client(signature_version="s3v4")
url = v4.generate_presigned_url("get_object", Params={"Bucket": "serving", "Key": key}, ExpiresIn=60)
out["presigned"] = urllib.request.urlopen(url).read().decode()
v2 = s3.generate_presigned_url("get_object", Params={"Bucket": "serving", "Key": key}, ExpiresIn=60)
try:
    urllib.request.urlopen(v2)
    out["v2"] = None
except urllib.error.HTTPError as e:
    out["v2"] = [e.code, "InvalidRequest" in e.read().decode()]
out["buckets"] = [b["Name"] for b in s3.list_buckets()["Buckets"]]
out["missing"] = err(lambda: s3.get_object(Bucket="serving", Key="nope"))
out["no_bucket"] = err(lambda: s3.head_bucket(Bucket="nothere"))
out["bad_secret"] = err(lambda: client(secret="0" * 40).get_object(Bucket="serving", Key=key))
out["bad_key"] = err(lambda: client(key="CUST0000000000000000").get_object(Bucket="serving", Key=key))
big = bytes(range(256)) * 4096 * 3
s3.put_object(Bucket="serving", Key="big", Body=big)
out["big"] = hashlib.sha256(s3.get_object(Bucket="serving", Key="big")["Body"].read()).hexdigest() == hashlib.sha256(big).hexdigest()
"#,
    );
    assert!(out["put"].as_str().unwrap().starts_with('"'), "{out}");
    assert_eq!(out["get"], "hello world", "{out}");
    assert_eq!(out["etag_matches"], true, "{out}");
    assert_eq!(out["range"], "world", "{out}");
    assert_eq!(out["head"], 11, "{out}");
    assert_eq!(
        out["create_again"],
        json!(["PreconditionFailed", 412]),
        "{out}"
    );
    assert_eq!(
        out["stale_match"],
        json!(["PreconditionFailed", 412]),
        "{out}"
    );
    assert_eq!(out["replace"], true, "{out}");
    assert_eq!(out["etag_is_md5"], json!([true, true, true]), "{out}");
    assert_eq!(out["md5_match"], "HELLO", "{out}");
    assert_eq!(out["md5_none_match"], json!(["304", 304]), "{out}");
    assert_eq!(
        out["old_md5_match"],
        json!(["PreconditionFailed", 412]),
        "{out}"
    );
    assert_eq!(out["keys"], json!(["docs/a b+c&d.txt"]), "{out}");
    assert_eq!(
        out["prefixes"],
        json!(["docs/sub0/", "docs/sub1/"]),
        "{out}"
    );
    let all = json!([
        "docs/a b+c&d.txt",
        "docs/sub0/f0",
        "docs/sub0/f2",
        "docs/sub0/f4",
        "docs/sub1/f1",
        "docs/sub1/f3"
    ]);
    assert_eq!(out["paged"], all, "{out}");
    assert_eq!(out["paged_v1"], all, "{out}");
    assert_eq!(
        out["create_again_big"],
        json!(["PreconditionFailed", 412]),
        "{out}"
    );
    assert_eq!(out["copy"], "HELLO", "{out}");
    assert_eq!(
        out["content_types"],
        json!(["text/csv", {"m": "1"}, "text/csv", "text/plain", {}]),
        "{out}"
    );
    assert_eq!(out["untyped"], "binary/octet-stream", "{out}");
    assert_eq!(out["deleted"], json!(["NoSuchKey", 404]), "{out}");
    assert_eq!(
        out["batch"],
        json!(["docs/sub0/f0", "docs/sub1/f1"]),
        "{out}"
    );
    assert_eq!(out["batch_errors"], json!([]), "{out}");
    assert_eq!(out["presigned"], "HELLO", "{out}");
    assert_eq!(out["v2"], json!([400, true]), "{out}");
    assert_eq!(out["buckets"], json!(["serving"]), "{out}");
    assert_eq!(out["missing"], json!(["NoSuchKey", 404]), "{out}");
    // The gate asks before the store is looked up: a principal learns
    // nothing about buckets it may not list.
    assert_eq!(out["no_bucket"], json!(["403", 403]), "{out}");
    assert_eq!(
        out["bad_secret"],
        json!(["SignatureDoesNotMatch", 403]),
        "{out}"
    );
    assert_eq!(out["bad_key"], json!(["InvalidAccessKeyId", 403]), "{out}");
    assert_eq!(out["big"], true, "{out}");
}

#[test]
fn the_access_policy_locks_and_the_preserved_store_govern_s3_requests() {
    let Some(clients) = clients() else { return };
    let (server, access, secret) = serve_with_key("", &["reader"]);
    let endpoint = server.s3.clone().unwrap();
    // The bearer admin writes an object the reader may read.
    let (status, body) = answer(
        agent()
            .put(&server.url("/v1/stores/serving/objects/shared"))
            .header("authorization", &bearer())
            .header("if-none-match", "*")
            .send(&b"readable"[..]),
    );
    assert_eq!(status, 201, "{body}");
    let out = boto3(
        &clients,
        &endpoint,
        &access,
        &secret,
        r#"
out["read"] = s3.get_object(Bucket="serving", Key="shared")["Body"].read().decode()
out["write"] = err(lambda: s3.put_object(Bucket="serving", Key="mine", Body=b"x"))
out["delete"] = err(lambda: s3.delete_object(Bucket="serving", Key="shared"))
out["preserved_write"] = err(lambda: s3.put_object(Bucket="preserved", Key="evidence", Body=b"x"))
out["acl"] = err(lambda: s3.get_object_acl(Bucket="serving", Key="shared"))
"#,
    );
    assert_eq!(out["read"], "readable", "{out}");
    assert_eq!(out["write"], json!(["AccessDenied", 403]), "{out}");
    assert_eq!(out["delete"], json!(["AccessDenied", 403]), "{out}");
    assert_eq!(
        out["preserved_write"],
        json!(["AccessDenied", 403]),
        "{out}"
    );
    assert_eq!(out["acl"], json!(["NotImplemented", 501]), "{out}");
    // Each refusal is audited under the principal.
    let (status, page) = answer(
        agent()
            .get(&server.url("/v1/audit?limit=1000&principal=alice"))
            .header("authorization", &bearer())
            .call(),
    );
    assert_eq!(status, 200, "{page}");
    let denied = page["records"].as_array().unwrap();
    assert_eq!(denied.len(), 3, "{page}");
    assert!(denied.iter().all(|r| r["actor"] == "principal:alice"));
}

#[test]
fn the_aws_cli_copies_syncs_and_lists_through_the_s3_endpoint() {
    let Some(clients) = clients() else { return };
    let (server, access, secret) = serve_with_key("", &["writer:store/serving"]);
    let endpoint = server.s3.clone().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let tree = dir.path().join("tree");
    std::fs::create_dir_all(tree.join("nested")).unwrap();
    std::fs::write(tree.join("one.txt"), b"one").unwrap();
    std::fs::write(tree.join("nested/two.bin"), vec![7u8; 100_000]).unwrap();
    // Over the CLI's 8 MiB multipart threshold: uploaded in parts.
    let large: Vec<u8> = (0..20u32 << 20).map(|i| (i % 251) as u8).collect();
    std::fs::write(tree.join("large.bin"), &large).unwrap();
    let aws = |args: &[&str]| {
        let output = Command::new(clients.join("aws"))
            .args(["--endpoint-url", &endpoint])
            .args(args)
            .env("AWS_ACCESS_KEY_ID", &access)
            .env("AWS_SECRET_ACCESS_KEY", &secret)
            .env("AWS_DEFAULT_REGION", "us-east-1")
            .env("AWS_CONFIG_FILE", dir.path().join("no-config"))
            .env(
                "AWS_SHARED_CREDENTIALS_FILE",
                dir.path().join("no-credentials"),
            )
            .output()
            .expect("the AWS CLI runs");
        (
            output.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&output.stdout).into_owned(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    };
    let one = tree.join("one.txt");
    let (code, _, err) = aws(&[
        "s3",
        "cp",
        one.to_str().unwrap(),
        "s3://serving/cli/one.txt",
    ]);
    assert_eq!(code, 0, "{err}");
    let (code, _, err) = aws(&["s3", "sync", tree.to_str().unwrap(), "s3://serving/synced/"]);
    assert_eq!(code, 0, "{err}");
    let (code, out, err) = aws(&["s3", "ls", "--recursive", "s3://serving/synced/"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("synced/one.txt") && out.contains("synced/nested/two.bin"),
        "{out}"
    );
    // A second sync finds nothing to do.
    let (code, out, err) = aws(&["s3", "sync", tree.to_str().unwrap(), "s3://serving/synced/"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.trim(), "", "{out}");
    let back = dir.path().join("back");
    let (code, _, err) = aws(&["s3", "sync", "s3://serving/synced/", back.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        std::fs::read(back.join("nested/two.bin")).unwrap(),
        vec![7u8; 100_000]
    );
    let (code, _, err) = aws(&[
        "s3api",
        "put-object",
        "--bucket",
        "serving",
        "--key",
        "cli/one.txt",
        "--body",
        one.to_str().unwrap(),
        "--if-none-match",
        "*",
    ]);
    assert_ne!(code, 0);
    assert!(err.contains("PreconditionFailed"), "{err}");
    let (code, out, err) = aws(&[
        "s3api",
        "list-object-versions",
        "--bucket",
        "serving",
        "--prefix",
        "cli/",
    ]);
    assert_eq!(code, 0, "{err}");
    let versions: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(versions["Versions"][0]["Key"], "cli/one.txt", "{versions}");
}

#[test]
fn hostile_requests_get_clean_s3_errors_and_store_nothing() {
    let Some(clients) = clients() else { return };
    let (server, access, secret) = serve_with_key("", &["writer:store/serving"]);
    let endpoint = server.s3.clone().unwrap();
    let out = boto3(
        &clients,
        &endpoint,
        &access,
        &secret,
        r#"
import base64, datetime, os, re, time, urllib.error, zlib
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

def send(method, path, body=b"", headers=None, sign=True, creds=Credentials(access, secret), payload=None):
    request = AWSRequest(method=method, url=endpoint + path, data=body, headers=dict(headers or {}))
    request.headers["x-amz-content-sha256"] = payload or hashlib.sha256(body).hexdigest()
    if sign:
        SigV4Auth(creds, "s3", "us-east-1").add_auth(request)
    prepared = request.prepare()
    sent = urllib.request.Request(prepared.url, data=body if method in ("PUT", "POST") else None,
                                  method=method, headers=dict(prepared.headers))
    try:
        with urllib.request.urlopen(sent) as response:
            return [response.status, None]
    except urllib.error.HTTPError as e:
        text = e.read().decode(errors="replace")
        code = re.search("<Code>(.*?)</Code>", text)
        return [e.code, code.group(1) if code else text[:200]]
    except Exception as e:
        return [0, type(e).__name__]

out["unsigned_put"] = send("PUT", "/serving/unsigned", b"x", sign=False)
out["wrong_secret"] = send("PUT", "/serving/forged", b"x", creds=Credentials(access, "0" * 40))
out["unknown_key"] = send("PUT", "/serving/forged", b"x", creds=Credentials("CUST0000000000000000", secret))
out["body_swapped"] = send("PUT", "/serving/swapped", b"x", payload=hashlib.sha256(b"y").hexdigest())
real = datetime.datetime
class Past(real):
    @classmethod
    def utcnow(cls):
        return real.utcnow() - datetime.timedelta(hours=1)
    @classmethod
    def now(cls, tz=None):
        return real.now(tz) - datetime.timedelta(hours=1)
datetime.datetime = Past
out["skewed"] = send("PUT", "/serving/skewed", b"x")
datetime.datetime = real
v4 = client(signature_version="s3v4")
s3.put_object(Bucket="serving", Key="kept", Body=b"kept")
expired = v4.generate_presigned_url("get_object", Params={"Bucket": "serving", "Key": "kept"}, ExpiresIn=1)
time.sleep(2)
try:
    urllib.request.urlopen(expired)
    out["expired"] = None
except urllib.error.HTTPError as e:
    out["expired"] = [e.code, re.search("<Code>(.*?)</Code>", e.read().decode()).group(1)]
out["dotdot"] = send("PUT", "/serving/a/../../etc/passwd", b"x")
out["not_utf8"] = send("PUT", "/serving/bad%FFkey", b"x")
out["long_key"] = send("PUT", "/serving/" + "k" * 1100, b"x")
out["bad_bucket"] = send("PUT", "/Not_A_Bucket/k", b"x")
out["no_bucket"] = send("PUT", "/nothere/k", b"x")
def md5(body):
    return base64.b64encode(hashlib.md5(body).digest()).decode()
bad_xml = b"<Delete><Object><Key>kept</Key></Object>"
out["bad_xml"] = send("POST", "/serving?delete", bad_xml, {"Content-MD5": md5(bad_xml)})
dtd = b'<!DOCTYPE d [<!ENTITY x "kept">]><Delete><Object><Key>&x;</Key></Object></Delete>'
out["dtd"] = send("POST", "/serving?delete", dtd, {"Content-MD5": md5(dtd)})
many = ("<Delete>" + "".join(f"<Object><Key>k{i}</Key></Object>" for i in range(1001)) + "</Delete>").encode()
out["too_many"] = send("POST", "/serving?delete", many, {"Content-MD5": md5(many)})
ok = b"<Delete><Object><Key>kept</Key></Object></Delete>"
out["wrong_md5"] = send("POST", "/serving?delete", ok, {"Content-MD5": md5(b"other")})
out["huge_header"] = send("GET", "/serving/kept", headers={"x-amz-meta-big": "v" * (1 << 20)})
out["acl_put"] = send("PUT", "/serving/kept?acl", b"<AccessControlPolicy/>")
out["bad_range"] = err(lambda: s3.get_object(Bucket="serving", Key="kept", Range="bytes=100-200"))
# The host's own publish stamps cannot be forged as user metadata.
out["forged_put"] = err(lambda: s3.put_object(Bucket="serving", Key="forged", Body=b"x", Metadata={"custodian-gen": "7"}))
out["forged_copy"] = err(lambda: s3.copy_object(Bucket="serving", Key="forged-copy", CopySource={"Bucket": "serving", "Key": "kept"}, MetadataDirective="REPLACE", Metadata={"custodian-epoch": "1"}))
out["forged_upload"] = err(lambda: s3.create_multipart_upload(Bucket="serving", Key="forged-mp", Metadata={"custodian-flush": "f"}))
out["uploads"] = [u["Key"] for u in s3.list_multipart_uploads(Bucket="serving").get("Uploads", [])]
# Bodies above 1 MiB are streamed into the store as they arrive: every
# check still decides before anything is published.
big = os.urandom(3 << 20)
out["big_wrong_md5"] = send("PUT", "/serving/big-md5", big, {"Content-MD5": md5(b"other")})
out["big_swapped"] = send("PUT", "/serving/big-swapped", big, payload=hashlib.sha256(b"y").hexdigest())
crc32 = base64.b64encode((zlib.crc32(big) ^ 1).to_bytes(4, "big")).decode()
out["big_wrong_crc32"] = send("PUT", "/serving/big-crc", big, {"x-amz-checksum-crc32": crc32})
cut = open_put("/serving/big-cut", len(big))
cut.send(big[:2 << 20])
cut.sock.close()
time.sleep(0.5)
out["keys"] = sorted(o["Key"] for o in s3.list_objects_v2(Bucket="serving").get("Contents", []))
out["kept"] = s3.get_object(Bucket="serving", Key="kept")["Body"].read().decode()
"#,
    );
    assert_eq!(out["unsigned_put"], json!([403, "AccessDenied"]), "{out}");
    assert_eq!(
        out["wrong_secret"],
        json!([403, "SignatureDoesNotMatch"]),
        "{out}"
    );
    assert_eq!(
        out["unknown_key"],
        json!([403, "InvalidAccessKeyId"]),
        "{out}"
    );
    assert_eq!(
        out["body_swapped"],
        json!([400, "XAmzContentSHA256Mismatch"]),
        "{out}"
    );
    assert_eq!(out["skewed"], json!([403, "RequestTimeTooSkewed"]), "{out}");
    assert_eq!(out["expired"], json!([403, "AccessDenied"]), "{out}");
    for case in ["dotdot", "not_utf8", "long_key", "bad_bucket"] {
        let status = out[case][0].as_u64().unwrap_or(0);
        assert!((400..500).contains(&status), "{case}: {out}");
    }
    assert_eq!(out["not_utf8"], json!([400, "InvalidArgument"]), "{out}");
    assert_eq!(out["long_key"], json!([400, "KeyTooLongError"]), "{out}");
    assert_eq!(
        out["bad_bucket"],
        json!([400, "InvalidBucketName"]),
        "{out}"
    );
    assert_eq!(out["no_bucket"], json!([403, "AccessDenied"]), "{out}");
    assert_eq!(out["bad_xml"], json!([400, "MalformedXML"]), "{out}");
    assert_eq!(out["dtd"], json!([400, "MalformedXML"]), "{out}");
    assert_eq!(out["too_many"], json!([400, "MalformedXML"]), "{out}");
    assert_eq!(out["wrong_md5"], json!([400, "BadDigest"]), "{out}");
    let huge = out["huge_header"][0].as_u64().unwrap_or(0);
    assert!(huge == 0 || (400..500).contains(&huge), "{out}");
    assert_eq!(out["acl_put"], json!([501, "NotImplemented"]), "{out}");
    for case in ["forged_put", "forged_copy", "forged_upload"] {
        assert_eq!(out[case], json!(["InvalidArgument", 400]), "{case}: {out}");
    }
    assert_eq!(out["uploads"], json!([]), "{out}");
    assert_eq!(out["big_wrong_md5"], json!([400, "BadDigest"]), "{out}");
    assert_eq!(
        out["big_swapped"],
        json!([400, "XAmzContentSHA256Mismatch"]),
        "{out}"
    );
    assert_eq!(out["big_wrong_crc32"], json!([400, "BadDigest"]), "{out}");
    assert_eq!(out["bad_range"], json!(["InvalidRange", 416]), "{out}");
    // Nothing any refused request named was stored, and the kept object
    // is intact.
    assert_eq!(out["keys"], json!(["kept"]), "{out}");
    assert_eq!(out["kept"], "kept", "{out}");
    // Nor did a refused or cut-off streamed body leave a file behind.
    let staging = server.data.join("serving/staging");
    let left: Vec<_> = std::fs::read_dir(&staging)
        .unwrap_or_else(|e| panic!("{}: {e}", staging.display()))
        .collect();
    assert!(left.is_empty(), "left in staging: {left:?}");
}

#[test]
fn a_streamed_body_that_stalls_is_refused_on_time_and_leaves_nothing_behind() {
    let Some(clients) = clients() else { return };
    let config = "[server]\nbody_timeout_ms = 300\n";
    let (server, access, secret) = serve_with_key(config, &["writer:store/serving"]);
    let endpoint = server.s3.clone().unwrap();
    let out = boto3(
        &clients,
        &endpoint,
        &access,
        &secret,
        r#"
import re, time
big = b"s" * (3 << 20)
connection = open_put("/serving/stalled", len(big))
connection.send(big[:2 << 20])
started = time.time()
time.sleep(1.5)
try:
    connection.send(big[2 << 20:])
except OSError:
    pass
try:
    response = connection.getresponse()
    text = response.read().decode(errors="replace")
    code = re.search("<Code>(.*?)</Code>", text)
    out["stalled"] = [response.status, code.group(1) if code else text[:200]]
except OSError as e:
    out["stalled"] = [0, type(e).__name__]
out["waited"] = time.time() - started
out["keys"] = [o["Key"] for o in s3.list_objects_v2(Bucket="serving").get("Contents", [])]
s3.put_object(Bucket="serving", Key="after", Body=b"a" * (2 << 20))
out["after"] = s3.head_object(Bucket="serving", Key="after")["ContentLength"]
"#,
    );
    // Refused (400 `RequestTimeout`, as S3 answers it) or, if the server
    // closed first, cut off; either way nothing was published and the
    // server goes on serving.
    let status = out["stalled"][0].as_u64().unwrap_or(0);
    assert!(
        out["stalled"] == json!([400, "RequestTimeout"]) || status == 0,
        "{out}"
    );
    assert_eq!(out["keys"], json!([]), "{out}");
    assert_eq!(out["after"], 2 << 20, "{out}");
    let staging = server.data.join("serving/staging");
    let left: Vec<_> = std::fs::read_dir(&staging).unwrap().collect();
    assert!(left.is_empty(), "left in staging: {left:?}");
}

#[test]
fn boto3s_transfer_manager_moves_100_mib_in_parts_and_a_bad_completion_publishes_nothing() {
    let Some(clients) = clients() else { return };
    let (server, access, secret) = serve_with_key("", &["writer:store/serving"]);
    let endpoint = server.s3.clone().unwrap();
    let out = boto3(
        &clients,
        &endpoint,
        &access,
        &secret,
        r#"
import os, tempfile
from boto3.s3.transfer import TransferConfig
data = os.urandom(100 << 20)
with tempfile.NamedTemporaryFile(delete=False) as f:
    f.write(data)
config = TransferConfig(multipart_threshold=8 << 20, multipart_chunksize=8 << 20, max_concurrency=8)
s3.upload_file(f.name, "serving", "big/object", Config=config)
out["size"] = s3.head_object(Bucket="serving", Key="big/object")["ContentLength"]
s3.download_file("serving", "big/object", f.name + ".back", Config=config)
with open(f.name + ".back", "rb") as back:
    out["same"] = back.read() == data
os.unlink(f.name)
os.unlink(f.name + ".back")

up = s3.create_multipart_upload(Bucket="serving", Key="mp")["UploadId"]
p1 = s3.upload_part(Bucket="serving", Key="mp", UploadId=up, PartNumber=1, Body=b"a" * 10)["ETag"]
p2 = s3.upload_part(Bucket="serving", Key="mp", UploadId=up, PartNumber=2, Body=b"bc" * 5)["ETag"]
def complete(parts):
    return lambda: s3.complete_multipart_upload(Bucket="serving", Key="mp", UploadId=up,
        MultipartUpload={"Parts": [{"PartNumber": n, "ETag": e} for n, e in parts]})
out["out_of_order"] = err(complete([(2, p2), (1, p1)]))
out["gap"] = err(complete([(1, p1), (3, p2)]))
out["swapped_etags"] = err(complete([(1, p2), (2, p1)]))
out["foreign_etag"] = err(complete([(1, '"d41d8cd98f00b204e9800998ecf8427e"'), (2, p2)]))
out["part_10001"] = err(lambda: s3.upload_part(Bucket="serving", Key="mp", UploadId=up, PartNumber=10001, Body=b"x"))
out["no_upload"] = err(lambda: s3.upload_part(Bucket="serving", Key="mp", UploadId="0" * 32, PartNumber=1, Body=b"x"))
out["pending"] = [u["Key"] for u in s3.list_multipart_uploads(Bucket="serving").get("Uploads", [])]
out["unpublished"] = err(lambda: s3.head_object(Bucket="serving", Key="mp"))
listed = s3.list_parts(Bucket="serving", Key="mp", UploadId=up)
out["listed"] = [[p["PartNumber"], p["ETag"] == e, p["Size"]] for p, e in zip(listed["Parts"], [p1, p2])]
page = s3.list_parts(Bucket="serving", Key="mp", UploadId=up, MaxParts=1)
out["paged"] = [page["IsTruncated"], page["NextPartNumberMarker"], [p["PartNumber"] for p in page["Parts"]]]
rest = s3.list_parts(Bucket="serving", Key="mp", UploadId=up, PartNumberMarker=1)
out["rest"] = [p["PartNumber"] for p in rest["Parts"]]
out["parts_elsewhere"] = err(lambda: s3.list_parts(Bucket="serving", Key="other", UploadId=up))
# A client resuming the upload completes it from the listing alone.
complete([(p["PartNumber"], p["ETag"]) for p in listed["Parts"]])()
out["mp"] = s3.get_object(Bucket="serving", Key="mp")["Body"].read().decode()
out["parts_after"] = err(lambda: s3.list_parts(Bucket="serving", Key="mp", UploadId=up))
other = s3.create_multipart_upload(Bucket="serving", Key="abandoned")["UploadId"]
s3.abort_multipart_upload(Bucket="serving", Key="abandoned", UploadId=other)
out["after_abort"] = [u["Key"] for u in s3.list_multipart_uploads(Bucket="serving").get("Uploads", [])]
"#,
    );
    assert_eq!(out["size"], 100 << 20, "{out}");
    assert_eq!(out["same"], true, "{out}");
    assert_eq!(
        out["listed"],
        json!([[1, true, 10], [2, true, 10]]),
        "{out}"
    );
    assert_eq!(out["paged"], json!([true, 1, [1]]), "{out}");
    assert_eq!(out["rest"], json!([2]), "{out}");
    assert_eq!(
        out["parts_elsewhere"],
        json!(["NoSuchUpload", 404]),
        "{out}"
    );
    assert_eq!(out["parts_after"], json!(["NoSuchUpload", 404]), "{out}");
    assert_eq!(
        out["out_of_order"],
        json!(["InvalidPartOrder", 400]),
        "{out}"
    );
    assert_eq!(out["gap"], json!(["InvalidPart", 400]), "{out}");
    assert_eq!(out["swapped_etags"], json!(["InvalidPart", 400]), "{out}");
    assert_eq!(out["foreign_etag"], json!(["InvalidPart", 400]), "{out}");
    assert_eq!(out["part_10001"], json!(["InvalidArgument", 400]), "{out}");
    assert_eq!(out["no_upload"], json!(["NoSuchUpload", 404]), "{out}");
    assert_eq!(out["pending"], json!(["mp"]), "{out}");
    assert_eq!(out["unpublished"], json!(["404", 404]), "{out}");
    assert_eq!(out["mp"], "aaaaaaaaaabcbcbcbcbc", "{out}");
    assert_eq!(out["after_abort"], json!([]), "{out}");
}

#[test]
fn content_a_takedown_withholds_is_451_over_s3_at_once_and_other_content_still_serves() {
    let Some(clients) = clients() else { return };
    let (server, access, secret) = serve_with_key("", &["writer:store/serving"]);
    let endpoint = server.s3.clone().unwrap();
    let push = |path: &str, bytes: &[u8]| {
        let (status, body) = answer(
            agent()
                .put(&server.url(&format!("/v1/repos/alpha/one/files/{path}")))
                .header("authorization", &bearer())
                .send(bytes),
        );
        assert_eq!(status, 200, "{body}");
        body["id"].as_str().unwrap().to_owned()
    };
    let taken = push("taken.txt", b"taken down content");
    let kept = push("kept.txt", b"content that stays");
    let (status, filed) = answer(
        agent()
            .post(&server.url("/v1/takedowns"))
            .header("authorization", &bearer())
            .send(&json_body(json!({"repository": "alpha/one", "objects": [taken]}))[..]),
    );
    assert_eq!(status, 201, "{filed}");
    let request = filed["id"].as_str().unwrap();
    // No wait: the filing's answer means the content is withheld.
    let script = format!(
        r#"
import urllib.error
taken, kept = "content/{taken}", "content/{kept}"
def code(f):
    try:
        f()
        return None
    except botocore.exceptions.ClientError as e:
        return [e.response["Error"]["Code"], e.response["ResponseMetadata"]["HTTPStatusCode"], e.response["Error"].get("Message", "")]
out["get"] = code(lambda: s3.get_object(Bucket="serving", Key=taken))
out["head"] = code(lambda: s3.head_object(Bucket="serving", Key=taken))
out["put"] = code(lambda: s3.put_object(Bucket="serving", Key=taken, Body=b"again"))
out["copy"] = code(lambda: s3.copy_object(Bucket="serving", Key="elsewhere", CopySource={{"Bucket": "serving", "Key": taken}}))
out["kept"] = s3.get_object(Bucket="serving", Key=kept)["Body"].read().decode()
"#
    );
    let out = boto3(&clients, &endpoint, &access, &secret, &script);
    assert_eq!(out["get"][0], "UnavailableForLegalReasons", "{out}");
    assert_eq!(out["get"][1], 451, "{out}");
    assert!(out["get"][2].as_str().unwrap().contains(request), "{out}");
    assert_eq!(out["head"][1], 451, "{out}");
    assert_eq!(out["put"][0], "UnavailableForLegalReasons", "{out}");
    assert_eq!(out["copy"][0], "UnavailableForLegalReasons", "{out}");
    assert_eq!(out["kept"], "content that stays", "{out}");
}

/// The `rclone` binary (Debian's; `.ci/run` installs it), or `None`
/// (after saying why) when this is not CI and it is missing.
fn rclone() -> Option<PathBuf> {
    let found = Command::new("rclone")
        .arg("version")
        .output()
        .is_ok_and(|o| o.status.success());
    if found {
        return Some(PathBuf::from("rclone"));
    }
    let how = "install rclone (Debian's `apt-get install rclone`; .ci/run does)";
    if std::env::var("CI").is_ok_and(|ci| ci == "true") {
        panic!("rclone is missing: {how}");
    }
    eprintln!("notice: skipping the rclone test: rclone is missing; {how}");
    None
}

/// Runs rclone with the remote `cust:` pointing at `endpoint` (configured
/// through the environment, as a script would, with no config file):
/// (success, stdout, stderr).
fn run_rclone(
    rclone: &Path,
    (endpoint, access, secret): (&str, &str, &str),
    args: &[&str],
) -> (bool, String, String) {
    let scratch = tempfile::tempdir().unwrap();
    let output = Command::new(rclone)
        .args(args)
        // Small cut-offs, so that a 12 MiB file goes up in parts.
        .args(["--s3-upload-cutoff", "5M", "--s3-chunk-size", "5M"])
        .env("RCLONE_CONFIG", scratch.path().join("rclone.conf"))
        .env("RCLONE_CONFIG_CUST_TYPE", "s3")
        .env("RCLONE_CONFIG_CUST_PROVIDER", "Other")
        .env("RCLONE_CONFIG_CUST_ENDPOINT", endpoint)
        .env("RCLONE_CONFIG_CUST_ACCESS_KEY_ID", access)
        .env("RCLONE_CONFIG_CUST_SECRET_ACCESS_KEY", secret)
        .env("RCLONE_CONFIG_CUST_REGION", "us-east-1")
        // The machine's CA bundle is for HTTPS elsewhere; this endpoint
        // is plain HTTP, and rclone fails to start on a bundle it cannot
        // read.
        .env_remove("AWS_CA_BUNDLE")
        .output()
        .expect("rclone runs");
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn rclone_copies_syncs_and_checks_a_tree_by_md5_through_the_s3_endpoint() {
    let Some(rclone) = rclone() else { return };
    let (server, access, secret) = serve_with_key("", &["writer:store/serving"]);
    let endpoint = server.s3.clone().unwrap();
    let remote = (endpoint.as_str(), access.as_str(), secret.as_str());
    let tree = tempfile::tempdir().unwrap();
    let root = tree.path();
    std::fs::create_dir_all(root.join("sub/deep")).unwrap();
    std::fs::write(root.join("a.txt"), b"alpha\n").unwrap();
    std::fs::write(root.join("empty"), b"").unwrap();
    let noise: Vec<u8> = (0..(1u32 << 20))
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    std::fs::write(root.join("sub/b.bin"), &noise).unwrap();
    std::fs::write(root.join("sub/deep/c.txt"), b"gamma\n").unwrap();
    // Above the 5 MiB cut-off: rclone uploads it in parts and records its
    // MD5 as metadata, since such an object's ETag names none.
    let big: Vec<u8> = noise.iter().cycle().take(12 << 20).copied().collect();
    std::fs::write(root.join("sub/big.bin"), &big).unwrap();
    let local = root.to_str().unwrap();

    let (ok, _, err) = run_rclone(&rclone, remote, &["copy", local, "cust:serving/rc"]);
    assert!(ok, "rclone copy failed:\n{err}");
    let (ok, _, err) = run_rclone(&rclone, remote, &["check", local, "cust:serving/rc"]);
    assert!(ok, "rclone check failed:\n{err}");
    assert!(err.contains("0 differences found"), "{err}");
    // Every file's hash was compared: none was taken on size alone.
    assert!(!err.contains("could not be checked"), "{err}");

    // Listed hashes are the files' MD5s.
    let (ok, out, err) = run_rclone(
        &rclone,
        remote,
        &["lsjson", "-R", "--hash", "--files-only", "cust:serving/rc"],
    );
    assert!(ok, "rclone lsjson failed:\n{err}");
    let listed: Value = serde_json::from_str(&out).unwrap();
    let md5_of = |path: &str| -> String {
        let entry = listed
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["Path"] == path)
            .unwrap_or_else(|| panic!("{path} is not listed: {out}"));
        entry["Hashes"]["md5"].as_str().unwrap_or("").to_owned()
    };
    assert_eq!(md5_of("a.txt"), md5_hex(b"alpha\n"));
    assert_eq!(md5_of("sub/b.bin"), md5_hex(&noise));
    assert_eq!(md5_of("sub/big.bin"), md5_hex(&big));

    // A sync carries a change, an addition and a deletion, and check
    // agrees afterwards.
    std::fs::write(root.join("a.txt"), b"alpha, changed\n").unwrap();
    std::fs::write(root.join("sub/new.txt"), b"new\n").unwrap();
    std::fs::remove_file(root.join("sub/deep/c.txt")).unwrap();
    let (ok, _, err) = run_rclone(&rclone, remote, &["sync", local, "cust:serving/rc"]);
    assert!(ok, "rclone sync failed:\n{err}");
    let (ok, _, err) = run_rclone(&rclone, remote, &["check", local, "cust:serving/rc"]);
    assert!(ok && err.contains("0 differences found"), "{err}");
    let (_, out, _) = run_rclone(
        &rclone,
        remote,
        &["lsf", "-R", "--files-only", "cust:serving/rc"],
    );
    let mut files: Vec<&str> = out.lines().collect();
    files.sort_unstable();
    assert_eq!(
        files,
        ["a.txt", "empty", "sub/b.bin", "sub/big.bin", "sub/new.txt"]
    );

    // Downloaded back, every file is byte for byte what was sent.
    let back = tempfile::tempdir().unwrap();
    let (ok, _, err) = run_rclone(
        &rclone,
        remote,
        &["copy", "cust:serving/rc", back.path().to_str().unwrap()],
    );
    assert!(ok, "rclone copy back failed:\n{err}");
    assert_eq!(std::fs::read(back.path().join("sub/big.bin")).unwrap(), big);
    assert_eq!(
        std::fs::read(back.path().join("a.txt")).unwrap(),
        b"alpha, changed\n"
    );

    // The check really compares content: the same size, other bytes, is
    // a difference rclone reports and fails on.
    let (ok, _, err) = run_rclone(
        &rclone,
        remote,
        &[
            "copyto",
            root.join("sub/new.txt").to_str().unwrap(),
            "cust:serving/rc/a.txt",
        ],
    );
    assert!(ok, "{err}");
    std::fs::write(root.join("sub/new.txt"), b"NEW\n").unwrap();
    let (ok, _, err) = run_rclone(&rclone, remote, &["check", local, "cust:serving/rc"]);
    assert!(!ok, "rclone check passed over two differences:\n{err}");
    assert!(err.contains("2 differences found"), "{err}");
}

/// The MD5 of `bytes` in lowercase hex.
fn md5_hex(bytes: &[u8]) -> String {
    use md5::Digest as _;
    hex::encode(md5::Md5::digest(bytes))
}

#[test]
fn with_a_domain_a_bucket_named_in_the_host_is_addressed_virtual_host_style() {
    let Some(clients) = clients() else { return };
    let (server, access, secret) =
        serve_with_key("[s3]\ndomain = \"s3.test\"\n", &["writer:store/serving"]);
    let endpoint = server.s3.clone().unwrap();
    let out = boto3(
        &clients,
        &endpoint,
        &access,
        &secret,
        r#"
import http.client, re
from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
port = int(endpoint.rsplit(":", 1)[1])
def send(method, host, path, body=b""):
    # Signed for the virtual host, sent to the loopback address (no DNS
    # names the bucket here).
    request = AWSRequest(method=method, url=f"http://{host}:{port}{path}", data=body)
    request.headers["x-amz-content-sha256"] = hashlib.sha256(body).hexdigest()
    request.headers["host"] = f"{host}:{port}"
    S3SigV4Auth(Credentials(access, secret), "s3", "us-east-1").add_auth(request)
    connection = http.client.HTTPConnection("127.0.0.1", port)
    connection.request(method, path, body=body or None, headers=dict(request.headers))
    response = connection.getresponse()
    return [response.status, response.read().decode(errors="replace")]
out["put"] = send("PUT", "serving.s3.test", "/vh/a%20b", b"virtual")[0]
out["get"] = send("GET", "serving.s3.test", "/vh/a%20b")
out["list"] = re.findall("<Key>(.*?)</Key>", send("GET", "serving.s3.test", "/?list-type=2")[1])
out["path_style"] = s3.get_object(Bucket="serving", Key="vh/a b")["Body"].read().decode()
out["unknown_bucket"] = re.findall("<Code>(.*?)</Code>", send("GET", "nothere.s3.test", "/k")[1])
out["other_host"] = send("GET", "serving.elsewhere.test", "/serving/vh/a%20b")
"#,
    );
    assert_eq!(out["put"], 200, "{out}");
    assert_eq!(out["get"], json!([200, "virtual"]), "{out}");
    assert_eq!(out["list"], json!(["vh/a b"]), "{out}");
    assert_eq!(out["path_style"], "virtual", "{out}");
    // The gate asks before the store is looked up, as for path style.
    assert_eq!(out["unknown_bucket"], json!(["AccessDenied"]), "{out}");
    // A host outside the domain is path style.
    assert_eq!(out["other_host"], json!([200, "virtual"]), "{out}");
}
