//! What an S3 request addresses and asks: the bucket and key of its
//! path (path-style addressing), its query parameters, and the operation
//! they name together with the method ([`Operation::classify`]), which
//! [`Operation::access`] maps onto the access policy's actions.

use std::collections::BTreeMap;

use axum::http::{HeaderMap, Method, Uri};
use custodian_core::decisions::access::{Action, Target};
use custodian_s3_wire::error::{Code, S3Error};
use percent_encoding::percent_decode_str;

/// Longest key S3 accepts, in bytes.
pub(super) const MAX_KEY_BYTES: usize = 1024;

/// Most query parameters looked at: S3's longest requests (a presigned
/// ListObjectsV2) carry about fifteen; a thousand is only an attack.
const MAX_QUERY_PARAMETERS: usize = 64;

/// The query parameters that name a sub-resource this endpoint does not
/// serve: a request naming one is `NotImplemented`, never answered as
/// if it were a plain object or bucket request (a `PUT ?acl` must not
/// overwrite the object with an ACL document).
const UNSUPPORTED: [&str; 28] = [
    "accelerate",
    "acl",
    "analytics",
    "attributes",
    "cors",
    "encryption",
    "intelligent-tiering",
    "inventory",
    "legal-hold",
    "lifecycle",
    "logging",
    "metrics",
    "notification",
    "object-lock",
    "ownershipControls",
    "policy",
    "policyStatus",
    "publicAccessBlock",
    "replication",
    "requestPayment",
    "restore",
    "retention",
    "select",
    "session",
    "tagging",
    "torrent",
    "website",
    "renameObject",
];

/// The bucket a `Host` header names under the endpoint's own `domain`
/// (virtual-host addressing: `BUCKET.DOMAIN`, any port, any case), or
/// `None` for any other host, which is then addressed path style.
pub(super) fn virtual_bucket<'h>(host: &'h str, domain: &str) -> Option<&'h str> {
    // An IPv6 literal has no bucket label; anything else drops its port.
    let name = if host.starts_with('[') {
        return None;
    } else {
        host.rsplit_once(':').map_or(host, |(name, _)| name)
    };
    let suffix = name.len().checked_sub(domain.len())?;
    let bucket = name.get(..suffix)?.strip_suffix('.')?;
    let tail = name.get(suffix..)?;
    (tail.eq_ignore_ascii_case(domain) && !bucket.is_empty()).then_some(bucket)
}

/// The bucket, key and query of a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Addressed {
    /// The bucket (a store's name), when the path names one.
    pub bucket: Option<String>,
    /// The key, when the path names one below the bucket.
    pub key: Option<String>,
    /// The query parameters, decoded; a parameter without a value maps to
    /// an empty string.
    pub query: BTreeMap<String, String>,
}

impl Addressed {
    /// Reads the address of `uri`: path style (`/bucket/key…`), or, when
    /// the `Host` named a bucket (`hosted`, see [`virtual_bucket`]),
    /// virtual-host style (`/key…`).
    ///
    /// # Errors
    /// `InvalidArgument` for a path or query that does not decode to
    /// UTF-8, or a repeated parameter; `KeyTooLongError` for a key over
    /// [`MAX_KEY_BYTES`]; `InvalidBucketName` for a bucket that cannot
    /// be one.
    pub(super) fn parse(uri: &Uri, hosted: Option<&str>) -> Result<Self, S3Error> {
        let raw = uri.path();
        let path = raw.strip_prefix('/').unwrap_or(raw);
        let (bucket, key) = match (hosted, path.split_once('/')) {
            (Some(bucket), _) => (
                Some(bucket.to_owned()),
                Some(path)
                    .filter(|p| !p.is_empty())
                    .map(|p| decode(p, "the key"))
                    .transpose()?,
            ),
            (None, None) if path.is_empty() => (None, None),
            (None, None) => (Some(decode(path, "the bucket")?), None),
            // `/bucket/` addresses the bucket, as S3 reads it.
            (None, Some((bucket, ""))) => (Some(decode(bucket, "the bucket")?), None),
            (None, Some((bucket, key))) => (
                Some(decode(bucket, "the bucket")?),
                Some(decode(key, "the key")?),
            ),
        };
        if let Some(bucket) = &bucket
            && !is_bucket_name(bucket)
        {
            return Err(S3Error::new(
                Code::InvalidBucketName,
                "The specified bucket is not valid.",
            )
            .on(bucket.clone()));
        }
        if let Some(key) = &key
            && key.len() > MAX_KEY_BYTES
        {
            return Err(S3Error::new(
                Code::KeyTooLongError,
                format!(
                    "Your key is {} bytes; the limit is {MAX_KEY_BYTES}.",
                    key.len()
                ),
            ));
        }
        let mut query = BTreeMap::new();
        for (n, pair) in uri.query().unwrap_or("").split('&').enumerate() {
            if pair.is_empty() {
                continue;
            }
            if n >= MAX_QUERY_PARAMETERS {
                return Err(S3Error::new(
                    Code::InvalidArgument,
                    format!("more than {MAX_QUERY_PARAMETERS} query parameters"),
                ));
            }
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            let name = decode_query(name)?;
            let value = decode_query(value)?;
            if query.insert(name.clone(), value).is_some() {
                return Err(S3Error::new(
                    Code::InvalidArgument,
                    format!("the query parameter {name:?} is repeated"),
                ));
            }
        }
        Ok(Self { bucket, key, query })
    }

    /// A query parameter.
    pub(super) fn param(&self, name: &str) -> Option<&str> {
        self.query.get(name).map(String::as_str)
    }

    /// `bucket` or `bucket/key`, for an error's `Resource`.
    pub(super) fn resource(&self) -> String {
        match (&self.bucket, &self.key) {
            (Some(b), Some(k)) => format!("/{b}/{k}"),
            (Some(b), None) => format!("/{b}"),
            _ => "/".into(),
        }
    }
}

/// Percent-decodes a path segment, which must be UTF-8.
fn decode(text: &str, what: &str) -> Result<String, S3Error> {
    percent_decode_str(text)
        .decode_utf8()
        .map(|s| s.into_owned())
        .map_err(|_| {
            S3Error::new(
                Code::InvalidArgument,
                format!("{what} is not UTF-8 once percent-decoded"),
            )
        })
}

/// Percent-decodes a query name or value. A `+` is a plus, as RFC 3986
/// and the signature's canonical query read it (SDKs send a space as
/// `%20`), so the parameter served is the parameter signed.
fn decode_query(text: &str) -> Result<String, S3Error> {
    decode(text, "a query parameter")
}

/// Whether `name` can be a bucket: S3's rules (3 to 63 characters of
/// lower-case letters, digits, `.` and `-`, starting and ending with a
/// letter or digit).
fn is_bucket_name(name: &str) -> bool {
    let bytes = name.as_bytes();
    (3..=63).contains(&bytes.len())
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'.' || *b == b'-')
        && bytes[0].is_ascii_alphanumeric()
        && bytes[bytes.len() - 1].is_ascii_alphanumeric()
}

/// The S3 operations this endpoint answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Operation {
    /// `GET /`.
    ListBuckets,
    /// `HEAD /bucket`.
    HeadBucket,
    /// `PUT /bucket`: buckets are the configured stores, so this only
    /// answers for one that exists.
    CreateBucket,
    /// `GET /bucket?location`.
    GetBucketLocation,
    /// `GET /bucket?versioning`.
    GetBucketVersioning,
    /// `GET /bucket` (version 1 listing).
    ListObjects,
    /// `GET /bucket?list-type=2`.
    ListObjectsV2,
    /// `GET /bucket?versions`.
    ListObjectVersions,
    /// `GET /bucket?uploads`.
    ListMultipartUploads,
    /// `POST /bucket?delete`.
    DeleteObjects,
    /// `PUT /bucket/key`.
    PutObject,
    /// `PUT /bucket/key` with `x-amz-copy-source`.
    CopyObject,
    /// `GET /bucket/key`.
    GetObject,
    /// `HEAD /bucket/key`.
    HeadObject,
    /// `DELETE /bucket/key`.
    DeleteObject,
    /// `POST /bucket/key?uploads`.
    CreateMultipartUpload,
    /// `PUT /bucket/key?partNumber=N&uploadId=U`.
    UploadPart,
    /// The same with `x-amz-copy-source`.
    UploadPartCopy,
    /// `POST /bucket/key?uploadId=U`.
    CompleteMultipartUpload,
    /// `DELETE /bucket/key?uploadId=U`.
    AbortMultipartUpload,
    /// `GET /bucket/key?uploadId=U`.
    ListParts,
}

impl Operation {
    /// The operation's name, as S3's API reference spells it.
    pub(super) fn name(self) -> &'static str {
        match self {
            Self::ListBuckets => "ListBuckets",
            Self::HeadBucket => "HeadBucket",
            Self::CreateBucket => "CreateBucket",
            Self::GetBucketLocation => "GetBucketLocation",
            Self::GetBucketVersioning => "GetBucketVersioning",
            Self::ListObjects => "ListObjects",
            Self::ListObjectsV2 => "ListObjectsV2",
            Self::ListObjectVersions => "ListObjectVersions",
            Self::ListMultipartUploads => "ListMultipartUploads",
            Self::DeleteObjects => "DeleteObjects",
            Self::PutObject => "PutObject",
            Self::CopyObject => "CopyObject",
            Self::GetObject => "GetObject",
            Self::HeadObject => "HeadObject",
            Self::DeleteObject => "DeleteObject",
            Self::CreateMultipartUpload => "CreateMultipartUpload",
            Self::UploadPart => "UploadPart",
            Self::UploadPartCopy => "UploadPartCopy",
            Self::CompleteMultipartUpload => "CompleteMultipartUpload",
            Self::AbortMultipartUpload => "AbortMultipartUpload",
            Self::ListParts => "ListParts",
        }
    }

    /// The operation `method` on `addressed` asks for.
    ///
    /// # Errors
    /// `NotImplemented` for a sub-resource or operation this endpoint
    /// does not serve; `MethodNotAllowed` for a method no operation of
    /// the resource has.
    pub(super) fn classify(
        method: &Method,
        addressed: &Addressed,
        headers: &HeaderMap,
    ) -> Result<Self, S3Error> {
        if let Some(name) = UNSUPPORTED
            .iter()
            .find(|name| addressed.query.contains_key(**name))
        {
            return Err(S3Error::new(
                Code::NotImplemented,
                format!("the `{name}` sub-resource is not implemented by this endpoint"),
            )
            .on(addressed.resource()));
        }
        let has = |name: &str| addressed.query.contains_key(name);
        let copy = headers.contains_key("x-amz-copy-source");
        let op = match (&addressed.bucket, &addressed.key) {
            (None, _) => match *method {
                Method::GET | Method::HEAD => Self::ListBuckets,
                _ => return Err(not_allowed(method, addressed)),
            },
            (Some(_), None) => match *method {
                Method::HEAD => Self::HeadBucket,
                Method::PUT => Self::CreateBucket,
                Method::GET if has("location") => Self::GetBucketLocation,
                Method::GET if has("versioning") => Self::GetBucketVersioning,
                Method::GET if has("versions") => Self::ListObjectVersions,
                Method::GET if has("uploads") => Self::ListMultipartUploads,
                Method::GET if addressed.param("list-type") == Some("2") => Self::ListObjectsV2,
                Method::GET if has("list-type") => {
                    return Err(S3Error::new(
                        Code::InvalidArgument,
                        "list-type is 2 (ListObjectsV2) or absent (ListObjects)",
                    ));
                }
                Method::GET => Self::ListObjects,
                Method::POST if has("delete") => Self::DeleteObjects,
                Method::DELETE => {
                    return Err(S3Error::new(
                        Code::NotImplemented,
                        "buckets are the host's configured stores; they are not deleted over S3",
                    )
                    .on(addressed.resource()));
                }
                _ => return Err(not_allowed(method, addressed)),
            },
            (Some(_), Some(_)) => match *method {
                Method::PUT if has("partNumber") || has("uploadId") => {
                    if copy {
                        Self::UploadPartCopy
                    } else {
                        Self::UploadPart
                    }
                }
                Method::PUT if copy => Self::CopyObject,
                Method::PUT => Self::PutObject,
                Method::GET if has("uploadId") => Self::ListParts,
                Method::GET => Self::GetObject,
                Method::HEAD => Self::HeadObject,
                Method::DELETE if has("uploadId") => Self::AbortMultipartUpload,
                Method::DELETE => Self::DeleteObject,
                Method::POST if has("uploads") => Self::CreateMultipartUpload,
                Method::POST if has("uploadId") => Self::CompleteMultipartUpload,
                _ => return Err(not_allowed(method, addressed)),
            },
        };
        Ok(op)
    }

    /// What the access policy is asked about this operation on
    /// `addressed`, declaring a body of `size` bytes. `None` for
    /// ListBuckets, which asks about each bucket in turn, and for the
    /// operations that ask twice (CopyObject and UploadPartCopy also read
    /// their source; DeleteObjects asks per key).
    pub(super) fn access(self, addressed: &Addressed, size: Option<u64>) -> (Action, Target) {
        let mut target = Target {
            store: addressed.bucket.clone(),
            key: addressed.key.clone(),
            ..Target::default()
        };
        let action = match self {
            Self::ListBuckets
            | Self::HeadBucket
            | Self::CreateBucket
            | Self::GetBucketLocation
            | Self::GetBucketVersioning
            | Self::ListMultipartUploads
            | Self::ListParts => Action::List,
            Self::ListObjects | Self::ListObjectsV2 | Self::ListObjectVersions => {
                target.key = addressed.param("prefix").map(str::to_owned);
                Action::List
            }
            Self::GetObject | Self::HeadObject => {
                target.version = addressed.param("versionId").map(str::to_owned);
                Action::Read
            }
            Self::PutObject | Self::UploadPart => {
                target.size = size;
                Action::Write
            }
            Self::CopyObject
            | Self::UploadPartCopy
            | Self::CreateMultipartUpload
            | Self::CompleteMultipartUpload
            | Self::AbortMultipartUpload => Action::Write,
            Self::DeleteObject => {
                target.version = addressed.param("versionId").map(str::to_owned);
                if target.version.is_some() {
                    Action::DeleteVersion
                } else {
                    Action::Delete
                }
            }
            // Each key is asked about on its own; the batch itself is a
            // delete in the bucket.
            Self::DeleteObjects => Action::Delete,
        };
        (action, target)
    }
}

fn not_allowed(method: &Method, addressed: &Addressed) -> S3Error {
    S3Error::new(
        Code::MethodNotAllowed,
        format!("The specified method ({method}) is not allowed against this resource."),
    )
    .on(addressed.resource())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addressed(uri: &str) -> Result<Addressed, S3Error> {
        Addressed::parse(&uri.parse::<Uri>().unwrap(), None)
    }

    fn op(method: Method, uri: &str) -> Result<Operation, S3Error> {
        Operation::classify(&method, &addressed(uri)?, &HeaderMap::new())
    }

    #[test]
    fn a_host_under_the_domain_names_its_bucket_and_any_other_host_names_none() {
        let domain = "s3.example.com";
        for (host, bucket) in [
            ("serving.s3.example.com", Some("serving")),
            ("serving.s3.example.com:9000", Some("serving")),
            ("serving.S3.Example.COM", Some("serving")),
            ("s3.example.com", None),
            (".s3.example.com", None),
            ("serving.other.com", None),
            ("servings3.example.com", None),
            ("127.0.0.1:9000", None),
            ("[::1]:9000", None),
            ("", None),
        ] {
            assert_eq!(virtual_bucket(host, domain), bucket, "{host}");
        }
    }

    #[test]
    fn a_virtual_host_address_takes_the_whole_path_as_its_key() {
        let uri = "/a/b%2Fc?versionId=v".parse::<Uri>().unwrap();
        let hosted = Addressed::parse(&uri, Some("serving")).unwrap();
        assert_eq!(hosted.bucket.as_deref(), Some("serving"));
        assert_eq!(hosted.key.as_deref(), Some("a/b/c"));
        assert_eq!(hosted.param("versionId"), Some("v"));
        let bucket = Addressed::parse(&"/".parse::<Uri>().unwrap(), Some("serving")).unwrap();
        assert_eq!(
            (bucket.bucket.as_deref(), bucket.key),
            (Some("serving"), None)
        );
        let bad = Addressed::parse(&"/k".parse::<Uri>().unwrap(), Some("Not_A_Bucket"));
        assert_eq!(bad.unwrap_err().code, Code::InvalidBucketName);
    }

    #[test]
    fn a_path_style_address_names_its_bucket_and_its_decoded_key() {
        let a =
            addressed("/serving/a%20b/c%2Fd?versionId=v%2B1&list-type=2&x-id=GetObject").unwrap();
        assert_eq!(a.bucket.as_deref(), Some("serving"));
        assert_eq!(a.key.as_deref(), Some("a b/c/d"));
        assert_eq!(a.param("versionId"), Some("v+1"));
        assert_eq!(a.param("list-type"), Some("2"));
        let root = addressed("/").unwrap();
        assert_eq!((root.bucket, root.key), (None, None));
        let bucket = addressed("/serving/?location").unwrap();
        assert_eq!(bucket.key, None);
        assert_eq!(bucket.param("location"), Some(""));
    }

    #[test]
    fn non_utf8_paths_bad_buckets_long_keys_and_repeated_parameters_are_refused() {
        assert_eq!(
            addressed("/serving/%FF").unwrap_err().code,
            Code::InvalidArgument
        );
        assert_eq!(
            addressed("/Serving/k").unwrap_err().code,
            Code::InvalidBucketName
        );
        assert_eq!(addressed("/a/k").unwrap_err().code, Code::InvalidBucketName);
        let long = format!("/serving/{}", "k".repeat(MAX_KEY_BYTES + 1));
        assert_eq!(addressed(&long).unwrap_err().code, Code::KeyTooLongError);
        assert_eq!(
            addressed("/serving/k?versionId=a&versionId=b")
                .unwrap_err()
                .code,
            Code::InvalidArgument
        );
        let many = format!(
            "/serving/k?{}",
            (0..100)
                .map(|i| format!("p{i}=1"))
                .collect::<Vec<_>>()
                .join("&")
        );
        assert_eq!(addressed(&many).unwrap_err().code, Code::InvalidArgument);
    }

    #[test]
    fn methods_and_sub_resources_name_the_operations() {
        assert_eq!(op(Method::GET, "/").unwrap(), Operation::ListBuckets);
        assert_eq!(op(Method::HEAD, "/b0b").unwrap(), Operation::HeadBucket);
        assert_eq!(
            op(Method::GET, "/b0b?list-type=2").unwrap(),
            Operation::ListObjectsV2
        );
        assert_eq!(op(Method::GET, "/b0b").unwrap(), Operation::ListObjects);
        assert_eq!(
            op(Method::GET, "/b0b?versions").unwrap(),
            Operation::ListObjectVersions
        );
        assert_eq!(
            op(Method::POST, "/b0b?delete").unwrap(),
            Operation::DeleteObjects
        );
        assert_eq!(op(Method::PUT, "/b0b/k").unwrap(), Operation::PutObject);
        assert_eq!(
            op(Method::PUT, "/b0b/k?partNumber=1&uploadId=u").unwrap(),
            Operation::UploadPart
        );
        assert_eq!(
            op(Method::POST, "/b0b/k?uploads").unwrap(),
            Operation::CreateMultipartUpload
        );
        assert_eq!(
            op(Method::POST, "/b0b/k?uploadId=u").unwrap(),
            Operation::CompleteMultipartUpload
        );
        assert_eq!(
            op(Method::DELETE, "/b0b/k?uploadId=u").unwrap(),
            Operation::AbortMultipartUpload
        );
        assert_eq!(
            op(Method::GET, "/b0b/k?uploadId=u").unwrap(),
            Operation::ListParts
        );
        let mut copy = HeaderMap::new();
        copy.insert("x-amz-copy-source", "/b0b/src".parse().unwrap());
        let a = addressed("/b0b/k").unwrap();
        assert_eq!(
            Operation::classify(&Method::PUT, &a, &copy).unwrap(),
            Operation::CopyObject
        );
    }

    #[test]
    fn unsupported_sub_resources_are_not_implemented_and_never_reach_an_object() {
        for uri in [
            "/b0b/k?acl",
            "/b0b/k?tagging",
            "/b0b?policy",
            "/b0b?lifecycle",
            "/b0b/k?retention",
        ] {
            for method in [Method::GET, Method::PUT, Method::DELETE] {
                assert_eq!(
                    op(method.clone(), uri).unwrap_err().code,
                    Code::NotImplemented,
                    "{method} {uri}"
                );
            }
        }
        assert_eq!(
            op(Method::DELETE, "/b0b").unwrap_err().code,
            Code::NotImplemented
        );
        assert_eq!(
            op(Method::PATCH, "/b0b/k").unwrap_err().code,
            Code::MethodNotAllowed
        );
        assert_eq!(
            op(Method::POST, "/b0b").unwrap_err().code,
            Code::MethodNotAllowed
        );
    }

    #[test]
    fn deleting_a_version_asks_for_delete_version_and_a_listing_names_its_prefix() {
        let a = addressed("/b0b/k?versionId=v1").unwrap();
        assert_eq!(
            Operation::DeleteObject.access(&a, None).0,
            Action::DeleteVersion
        );
        let a = addressed("/b0b/k").unwrap();
        assert_eq!(Operation::DeleteObject.access(&a, None).0, Action::Delete);
        let a = addressed("/b0b?list-type=2&prefix=data%2F").unwrap();
        let (action, target) = Operation::ListObjectsV2.access(&a, None);
        assert_eq!(action, Action::List);
        assert_eq!(target.key.as_deref(), Some("data/"));
        assert_eq!(target.store.as_deref(), Some("b0b"));
    }
}
