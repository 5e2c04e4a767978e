//! S3's errors: a code a client's SDK switches on, the HTTP status that
//! goes with it, and a message for people. [`Code`] is the one table of
//! the codes this endpoint answers and their statuses, so a code is never
//! sent with another status than S3's. The document an error is sent as
//! is [`crate::xml::error_document`].

/// An S3 error code this endpoint answers, with its HTTP status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Code {
    /// 403: the policy, a lock or the host's own rule refuses the request.
    AccessDenied,
    /// 400: the `Authorization` header cannot be parsed, or names the
    /// wrong region or service.
    AuthorizationHeaderMalformed,
    /// 400: the body's checksum is not the one claimed.
    BadDigest,
    /// 409: the bucket is not empty (never: buckets are configured).
    BucketAlreadyOwnedByYou,
    /// 400: a body is longer than its declared length.
    EntityTooLarge,
    /// 400: a part other than the last is smaller than the minimum.
    EntityTooSmall,
    /// 400: the body is shorter than its declared length.
    IncompleteBody,
    /// 500: the server failed.
    InternalError,
    /// 403: no credential has this access key id.
    InvalidAccessKeyId,
    /// 400: a parameter or header has a bad value.
    InvalidArgument,
    /// 400: the bucket name cannot be a bucket.
    InvalidBucketName,
    /// 400: a `Content-MD5` is not base64 of 16 bytes.
    InvalidDigest,
    /// 400: a Complete names a part that was not uploaded, or with
    /// another etag.
    InvalidPart,
    /// 400: a Complete lists its parts out of order.
    InvalidPartOrder,
    /// 416: the range is outside the object.
    InvalidRange,
    /// 400: the request is not valid for this endpoint.
    InvalidRequest,
    /// 400: the request's signing date is not a date.
    InvalidSecurity,
    /// 400: an XML body is not well formed or not the expected document.
    MalformedXML,
    /// 405: the method is not allowed on this resource.
    MethodNotAllowed,
    /// 411: a body needs a declared length.
    MissingContentLength,
    /// 403: the request carries no credential and anonymous access is off.
    MissingSecurityHeader,
    /// 404: no such bucket (store).
    NoSuchBucket,
    /// 404: no such key (or the key's current version is a delete marker).
    NoSuchKey,
    /// 404: no such multipart upload.
    NoSuchUpload,
    /// 404: no such version.
    NoSuchVersion,
    /// 501: the operation is not one this endpoint implements.
    NotImplemented,
    /// 304: a conditional read's object has not changed.
    NotModified,
    /// 412: a condition (`If-Match`, `If-None-Match` on a write) failed.
    PreconditionFailed,
    /// 409: a conditional write raced another; retry.
    ConditionalRequestConflict,
    /// 400: the body paused for too long; nothing was stored.
    RequestTimeout,
    /// 403: the request's time is too far from the server's.
    RequestTimeTooSkewed,
    /// 403: the signature does not match the request.
    SignatureDoesNotMatch,
    /// 503: the server cannot take the request now; retry later.
    ServiceUnavailable,
    /// 503: slow down.
    SlowDown,
    /// 451: a takedown withholds the object (see the endpoint's docs for
    /// why 451 rather than 403).
    UnavailableForLegalReasons,
    /// 400: the body's SHA-256 is not the one signed.
    XAmzContentSHA256Mismatch,
    /// 400: a header or query parameter this endpoint does not accept.
    UnexpectedContent,
    /// 400: the request's headers are too large.
    RequestHeaderSectionTooLarge,
    /// 400: a key is longer than 1024 bytes.
    KeyTooLongError,
}

impl Code {
    /// The code as S3 spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::AccessDenied => "AccessDenied",
            Self::AuthorizationHeaderMalformed => "AuthorizationHeaderMalformed",
            Self::BadDigest => "BadDigest",
            Self::BucketAlreadyOwnedByYou => "BucketAlreadyOwnedByYou",
            Self::EntityTooLarge => "EntityTooLarge",
            Self::EntityTooSmall => "EntityTooSmall",
            Self::IncompleteBody => "IncompleteBody",
            Self::InternalError => "InternalError",
            Self::InvalidAccessKeyId => "InvalidAccessKeyId",
            Self::InvalidArgument => "InvalidArgument",
            Self::InvalidBucketName => "InvalidBucketName",
            Self::InvalidDigest => "InvalidDigest",
            Self::InvalidPart => "InvalidPart",
            Self::InvalidPartOrder => "InvalidPartOrder",
            Self::InvalidRange => "InvalidRange",
            Self::InvalidRequest => "InvalidRequest",
            Self::InvalidSecurity => "InvalidSecurity",
            Self::MalformedXML => "MalformedXML",
            Self::MethodNotAllowed => "MethodNotAllowed",
            Self::MissingContentLength => "MissingContentLength",
            Self::MissingSecurityHeader => "MissingSecurityHeader",
            Self::NoSuchBucket => "NoSuchBucket",
            Self::NoSuchKey => "NoSuchKey",
            Self::NoSuchUpload => "NoSuchUpload",
            Self::NoSuchVersion => "NoSuchVersion",
            Self::NotImplemented => "NotImplemented",
            Self::NotModified => "NotModified",
            Self::PreconditionFailed => "PreconditionFailed",
            Self::ConditionalRequestConflict => "ConditionalRequestConflict",
            Self::RequestTimeout => "RequestTimeout",
            Self::RequestTimeTooSkewed => "RequestTimeTooSkewed",
            Self::SignatureDoesNotMatch => "SignatureDoesNotMatch",
            Self::ServiceUnavailable => "ServiceUnavailable",
            Self::SlowDown => "SlowDown",
            Self::UnavailableForLegalReasons => "UnavailableForLegalReasons",
            Self::XAmzContentSHA256Mismatch => "XAmzContentSHA256Mismatch",
            Self::UnexpectedContent => "UnexpectedContent",
            Self::RequestHeaderSectionTooLarge => "RequestHeaderSectionTooLarge",
            Self::KeyTooLongError => "KeyTooLongError",
        }
    }

    /// The HTTP status S3 answers the code with.
    pub fn status(self) -> u16 {
        match self {
            Self::NotModified => 304,
            Self::AuthorizationHeaderMalformed
            | Self::BadDigest
            | Self::EntityTooLarge
            | Self::EntityTooSmall
            | Self::IncompleteBody
            | Self::InvalidArgument
            | Self::InvalidBucketName
            | Self::InvalidDigest
            | Self::InvalidPart
            | Self::InvalidPartOrder
            | Self::InvalidRequest
            | Self::InvalidSecurity
            | Self::MalformedXML
            | Self::XAmzContentSHA256Mismatch
            | Self::UnexpectedContent
            | Self::RequestHeaderSectionTooLarge
            | Self::RequestTimeout
            | Self::KeyTooLongError => 400,
            Self::AccessDenied
            | Self::InvalidAccessKeyId
            | Self::MissingSecurityHeader
            | Self::RequestTimeTooSkewed
            | Self::SignatureDoesNotMatch => 403,
            Self::NoSuchBucket | Self::NoSuchKey | Self::NoSuchUpload | Self::NoSuchVersion => 404,
            Self::MethodNotAllowed => 405,
            Self::BucketAlreadyOwnedByYou | Self::ConditionalRequestConflict => 409,
            Self::MissingContentLength => 411,
            Self::PreconditionFailed => 412,
            Self::InvalidRange => 416,
            Self::UnavailableForLegalReasons => 451,
            Self::InternalError => 500,
            Self::NotImplemented => 501,
            Self::ServiceUnavailable | Self::SlowDown => 503,
        }
    }
}

impl std::fmt::Display for Code {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An S3 error answer: its code, a message, and the resource it concerns.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{code}: {message}")]
pub struct S3Error {
    /// The code (and with it the status).
    pub code: Code,
    /// What went wrong, for people.
    pub message: String,
    /// The bucket or `bucket/key` the request named, when it named one.
    pub resource: Option<String>,
}

impl S3Error {
    /// An error of `code` saying `message`.
    pub fn new(code: Code, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            resource: None,
        }
    }

    /// The same error, naming `resource`.
    #[must_use]
    pub fn on(mut self, resource: impl Into<String>) -> Self {
        self.resource = Some(resource.into());
        self
    }

    /// The HTTP status.
    pub fn status(&self) -> u16 {
        self.code.status()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signature_and_clock_errors_are_forbidden_and_malformed_bodies_are_bad_requests() {
        assert_eq!(Code::SignatureDoesNotMatch.status(), 403);
        assert_eq!(Code::RequestTimeTooSkewed.status(), 403);
        assert_eq!(Code::MalformedXML.status(), 400);
        assert_eq!(Code::NotImplemented.status(), 501);
        assert_eq!(Code::UnavailableForLegalReasons.status(), 451);
    }
}
