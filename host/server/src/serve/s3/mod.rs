//! The S3 endpoint: the S3 REST API on its own listener (`[s3] listen`),
//! so that standard clients (the AWS CLI, boto3, rclone, DVC) read and
//! write the host's stores. Each configured store is a bucket, addressed
//! path-style (`http://host:port/bucket/key`), or virtual-host style
//! (`http://bucket.DOMAIN:port/key`) when `[s3] domain` names the
//! endpoint's own host name.
//!
//! # Who calls
//!
//! Every request is signed with AWS Signature V4 (`auth.rs`): by its
//! `Authorization` header or as a presigned URL, with a signed,
//! `UNSIGNED-PAYLOAD` or streaming `aws-chunked` body (signed chunks, or
//! unsigned chunks with a checksum trailer, which current SDKs send by
//! default). The access key is a principal's S3 key pair (`custodian
//! principal s3-key NAME`, or `POST /v1/principals/{name}/s3-keys`). An
//! unsigned request is the anonymous reader when the server's reads are
//! open (`[server] read_access = "open"`), and refused otherwise.
//!
//! # What policies do to S3 requests
//!
//! The same as to the `/v1` routes, through the same gates:
//! - the access plugin is asked about every operation
//!   (`Operation::access` in `request.rs` maps each to the world's actions:
//!   reads are `read`, listings `list`, writes and every multipart step
//!   `write`, deletes `delete` or `delete-version`); a denial is 403
//!   `AccessDenied` with the policy's reason, audited under the
//!   principal;
//! - the `preserved` store takes no write or delete from any principal;
//! - a lock or legal hold refuses the destructive request (403
//!   `AccessDenied` with the reason; see `custodian_core::locks`);
//! - content a takedown withholds answers **451
//!   `UnavailableForLegalReasons`** for reads and writes of its key. 451
//!   rather than S3's usual 403: every S3 client treats a 4xx other than
//!   a throttle as final (none retries it), prints the code and message,
//!   and 451 says exactly what happened (RFC 7725), where a 403 would send
//!   an operator looking for a missing permission.
//!
//! # Operations
//!
//! See `Operation` in `request.rs`; any other sub-resource is `NotImplemented`.
//! Errors are S3's XML documents with S3's codes (`errors.rs`), every
//! response carries an `x-amz-request-id`.

mod auth;
mod body;
mod buckets;
mod errors;
mod etag;
mod multipart;
mod objects;
mod request;

use std::sync::Arc;
use std::time::Instant;

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::header::{CONTENT_LENGTH, CONTENT_TYPE, RETRY_AFTER};
use axum::http::request::Parts;
use axum::http::{HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use custodian_core::decisions::access::{Action, Principal, Target};
use custodian_s3_wire::error::{Code, S3Error};

use crate::serve::Host;
use crate::serve::http::access;
use request::{Addressed, Operation};

/// What every request of the endpoint shares: the host, and the
/// endpoint's own domain for virtual-host addressing (`[s3] domain`).
#[derive(Clone)]
struct Endpoint {
    host: Arc<Host>,
    domain: Option<Arc<str>>,
}

/// The S3 API over `host`; with a `domain`, a request whose `Host` is
/// `BUCKET.DOMAIN` is addressed virtual-host style.
pub fn router(host: Arc<Host>, domain: Option<String>) -> Router {
    let endpoint = Endpoint {
        host,
        domain: domain.map(Arc::from),
    };
    Router::new().fallback(handle).with_state(endpoint)
}

/// One request in progress: who sent it, what it addresses, and its head.
pub(super) struct Call {
    host: Arc<Host>,
    principal: Principal,
    verified: Option<custodian_s3_wire::sigv4::Verified>,
    parts: Parts,
    addressed: Addressed,
    operation: Operation,
}

impl Call {
    /// The bucket's store.
    fn store(&self) -> Result<(String, Arc<dyn custodian_object::ObjectStore>), S3Error> {
        let name = self
            .addressed
            .bucket
            .clone()
            .ok_or_else(|| S3Error::new(Code::InvalidRequest, "the request names no bucket"))?;
        let store = self
            .host
            .stores
            .get(&name)
            .cloned()
            .ok_or_else(|| no_such_bucket(&name))?;
        Ok((name, store))
    }

    /// The key the path names.
    fn key(&self) -> Result<&str, S3Error> {
        self.addressed
            .key
            .as_deref()
            .ok_or_else(|| S3Error::new(Code::InvalidRequest, "the request names no key"))
    }

    /// Asks the access policy about `action` on `target` by this caller.
    async fn judge(&self, action: Action, target: Target) -> Result<Target, S3Error> {
        access::judge(
            &self.host,
            &self.principal,
            action,
            target,
            access::passed_headers(&self.parts.headers),
        )
        .await
        .map_err(errors::of_api)
    }

    /// The request's header `name` as text.
    fn header(&self, name: &str) -> Result<Option<&str>, S3Error> {
        self.parts
            .headers
            .get(name)
            .map(|v| {
                v.to_str().map(str::trim).map_err(|_| {
                    S3Error::new(
                        Code::InvalidArgument,
                        format!("the {name} header is not visible ASCII"),
                    )
                })
            })
            .transpose()
    }
}

fn no_such_bucket(name: &str) -> S3Error {
    S3Error::new(
        Code::NoSuchBucket,
        "The specified bucket does not exist (the buckets are the host's configured stores).",
    )
    .on(name.to_owned())
}

/// Serves one request: its answer, or its error as S3's XML.
async fn handle(State(endpoint): State<Endpoint>, request: Request) -> Response {
    let started = Instant::now();
    let id = request_id();
    let method = request.method().clone();
    let host = endpoint.host.clone();
    let (answer, operation) = serve(endpoint, request).await;
    let mut response = match answer {
        Ok(response) => response,
        Err(error) => error_response(&error, &id, method == Method::HEAD),
    };
    if let Ok(value) = HeaderValue::from_str(&id) {
        response.headers_mut().insert("x-amz-request-id", value);
    }
    response
        .headers_mut()
        .insert("server", HeaderValue::from_static("custodian"));
    let route = format!("s3:{}", operation.map_or("unclassified", Operation::name));
    host.metrics
        .http_request(&method, &route, response.status(), started.elapsed());
    response
}

/// Authenticates, classifies, gates and dispatches `request`.
async fn serve(
    Endpoint { host, domain }: Endpoint,
    request: Request,
) -> (Result<Response, S3Error>, Option<Operation>) {
    let (parts, body) = request.into_parts();
    let hosted = domain.as_deref().and_then(|domain| {
        let named = parts.headers.get(axum::http::header::HOST)?.to_str().ok()?;
        request::virtual_bucket(named, domain)
    });
    let addressed = match Addressed::parse(&parts.uri, hosted) {
        Ok(addressed) => addressed,
        Err(error) => return (Err(error), None),
    };
    let caller = match auth::authenticate(&host, &parts).await {
        Ok(caller) => caller,
        Err(error) => return (Err(error.on(addressed.resource())), None),
    };
    let operation = match Operation::classify(&parts.method, &addressed, &parts.headers) {
        Ok(operation) => operation,
        Err(error) => return (Err(error), None),
    };
    let resource = addressed.resource();
    let call = Call {
        host,
        principal: caller.principal,
        verified: caller.verified,
        parts,
        addressed,
        operation,
    };
    let answer = dispatch(&call, body).await.map_err(|e| {
        if e.resource.is_none() {
            e.on(resource)
        } else {
            e
        }
    });
    (answer, Some(operation))
}

async fn dispatch(call: &Call, body: Body) -> Result<Response, S3Error> {
    use Operation as Op;
    // ListBuckets asks about each bucket; the copies and the batch delete
    // ask about each object they touch, in their handlers.
    if !matches!(
        call.operation,
        Op::ListBuckets | Op::CopyObject | Op::UploadPartCopy | Op::DeleteObjects
    ) {
        let size = call
            .header(CONTENT_LENGTH.as_str())?
            .and_then(|v| v.parse().ok());
        let size = call
            .header("x-amz-decoded-content-length")?
            .and_then(|v| v.parse().ok())
            .or(size);
        let (action, target) = call.operation.access(&call.addressed, size);
        call.judge(action, target).await?;
    }
    match call.operation {
        Op::ListBuckets => buckets::list_buckets(call).await,
        Op::HeadBucket => buckets::head_bucket(call),
        Op::CreateBucket => buckets::create_bucket(call),
        Op::GetBucketLocation => buckets::location(call),
        Op::GetBucketVersioning => buckets::versioning(call),
        Op::ListObjects => buckets::list_objects(call, false).await,
        Op::ListObjectsV2 => buckets::list_objects(call, true).await,
        Op::ListObjectVersions => buckets::list_versions(call).await,
        Op::DeleteObjects => buckets::delete_objects(call, body).await,
        Op::PutObject => objects::put(call, body).await,
        Op::CopyObject => objects::copy(call).await,
        Op::GetObject => objects::get(call, false).await,
        Op::HeadObject => objects::get(call, true).await,
        Op::DeleteObject => objects::delete(call).await,
        Op::ListMultipartUploads => multipart::list_uploads(call).await,
        Op::CreateMultipartUpload => multipart::create(call).await,
        Op::UploadPart => multipart::upload_part(call, body).await,
        Op::UploadPartCopy => multipart::upload_part_copy(call).await,
        Op::CompleteMultipartUpload => multipart::complete(call, body).await,
        Op::AbortMultipartUpload => multipart::abort(call).await,
        Op::ListParts => multipart::list_parts(call).await,
    }
}

/// An XML document answered with `status`.
fn xml(status: StatusCode, document: String) -> Response {
    (
        status,
        [(CONTENT_TYPE, HeaderValue::from_static("application/xml"))],
        document,
    )
        .into_response()
}

/// `error` as S3 answers it: its status, and its XML document unless the
/// request was a `HEAD` or the answer a 304 (neither has a body).
fn error_response(error: &S3Error, id: &str, head: bool) -> Response {
    let status = StatusCode::from_u16(error.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut response = if head || status == StatusCode::NOT_MODIFIED {
        status.into_response()
    } else {
        xml(status, custodian_s3_wire::xml::error_document(error, id))
    };
    if status == StatusCode::SERVICE_UNAVAILABLE {
        response.headers_mut().insert(
            RETRY_AFTER,
            HeaderValue::from(crate::serve::http::RETRY_AFTER_SECS),
        );
    }
    response
}

/// A request id: unique within the process, and across restarts by its
/// random prefix (it names a request in logs and bug reports, nothing
/// more).
fn request_id() -> String {
    use std::sync::OnceLock;
    use std::sync::atomic::{AtomicU64, Ordering};
    static PREFIX: OnceLock<u32> = OnceLock::new();
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let prefix = *PREFIX.get_or_init(|| {
        let mut bytes = [0u8; 4];
        // Without randomness the ids are still unique within the process.
        let _ = getrandom::fill(&mut bytes);
        u32::from_le_bytes(bytes)
    });
    format!("{prefix:08X}{:016X}", NEXT.fetch_add(1, Ordering::Relaxed))
}
