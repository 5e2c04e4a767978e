//! A minimal etcd v3 gRPC client: the messages and the three calls the
//! backend makes (`KV.Range`, `KV.Txn`, `Auth.Authenticate`), on tonic's
//! HTTP/2 channel and prost's codec.
//!
//! # Why our own
//!
//! etcd's client crates generate their messages from etcd's `.proto` files
//! in a build script that runs a system `protoc`, so a machine with only
//! rustup could not build the host. The messages here are written by hand
//! with `#[derive(prost::Message)]`, using the field numbers of etcd's
//! public `rpc.proto` and `kv.proto` (stable API since etcd 3.0), and the
//! calls go through [`tonic::client::Grpc`] directly: no build script, no
//! code generation.
//!
//! # Only the fields the backend uses
//!
//! Each message declares only the fields this crate sets or reads. That is
//! sound on the wire: prost skips a field it does not know when decoding
//! (etcd's answers carry more than these), and a request field left out is
//! not sent, which proto3 defines as its default value: exactly what etcd
//! assumes when the field is absent. For the same reason the `oneof`s list
//! only the variants the backend sends or reads: nested transactions are
//! never sent, and the answers to writes are never looked at (they decode
//! as an empty [`ResponseOp`]).
//!
//! # Authentication
//!
//! With credentials, [`Client::connect`] authenticates and every later
//! call carries the token in the `token` metadata header, as etcd's own
//! clients send it; [`Client::refresh_token`] fetches a new one when etcd
//! no longer accepts it. The token is shared by every clone of a client.

use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use http::uri::PathAndQuery;
use tonic::client::Grpc;
use tonic::metadata::AsciiMetadataValue;
use tonic::transport::channel::Change;
use tonic::transport::{Channel, ClientTlsConfig, Endpoint};
use tonic::{Request, Status};
use tonic_prost::ProstCodec;

/// The metadata header etcd reads the auth token from.
const TOKEN_HEADER: &str = "token";
/// `KV.Range` in etcd's `rpc.proto`.
const RANGE: &str = "/etcdserverpb.KV/Range";
/// `KV.Txn` in etcd's `rpc.proto`.
const TXN: &str = "/etcdserverpb.KV/Txn";
/// `Auth.Authenticate` in etcd's `rpc.proto`.
const AUTHENTICATE: &str = "/etcdserverpb.Auth/Authenticate";

/// `etcdserverpb.ResponseHeader`: where and when a request was served.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ResponseHeader {
    /// The store's revision when the request was applied.
    #[prost(int64, tag = "3")]
    pub revision: i64,
}

/// `mvccpb.KeyValue`: one key and its value.
#[derive(Clone, PartialEq, prost::Message)]
pub struct KeyValue {
    /// The key.
    #[prost(bytes = "vec", tag = "1")]
    pub key: Vec<u8>,
    /// The value held at the key.
    #[prost(bytes = "vec", tag = "5")]
    pub value: Vec<u8>,
}

/// `etcdserverpb.RangeRequest`: read one key, or the keys of a range.
#[derive(Clone, PartialEq, prost::Message)]
pub struct RangeRequest {
    /// The key, or the first key of the range.
    #[prost(bytes = "vec", tag = "1")]
    pub key: Vec<u8>,
    /// Empty: only `key`; otherwise the range `[key, range_end)`.
    #[prost(bytes = "vec", tag = "2")]
    pub range_end: Vec<u8>,
    /// The most keys answered; 0 is no limit.
    #[prost(int64, tag = "3")]
    pub limit: i64,
    /// The revision to read at; 0 is the latest.
    #[prost(int64, tag = "4")]
    pub revision: i64,
}

/// `etcdserverpb.RangeResponse`: the keys read.
#[derive(Clone, PartialEq, prost::Message)]
pub struct RangeResponse {
    /// The revision the read was served at.
    #[prost(message, optional, tag = "1")]
    pub header: Option<ResponseHeader>,
    /// The keys found, in key order.
    #[prost(message, repeated, tag = "2")]
    pub kvs: Vec<KeyValue>,
    /// Whether the range holds more keys than the limit let through.
    #[prost(bool, tag = "3")]
    pub more: bool,
}

/// `etcdserverpb.PutRequest`: set a key's value.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PutRequest {
    /// The key.
    #[prost(bytes = "vec", tag = "1")]
    pub key: Vec<u8>,
    /// Its new value.
    #[prost(bytes = "vec", tag = "2")]
    pub value: Vec<u8>,
}

/// `etcdserverpb.DeleteRangeRequest`: delete a key (without `range_end`,
/// which the backend never sends, only that key).
#[derive(Clone, PartialEq, prost::Message)]
pub struct DeleteRangeRequest {
    /// The key.
    #[prost(bytes = "vec", tag = "1")]
    pub key: Vec<u8>,
}

/// `etcdserverpb.RequestOp`: one operation of a transaction's branch.
#[derive(Clone, PartialEq, prost::Message)]
pub struct RequestOp {
    /// The operation (`request_txn`, 4, is never sent).
    #[prost(oneof = "request_op::Request", tags = "1, 2, 3")]
    pub request: Option<request_op::Request>,
}

/// The `oneof` of [`RequestOp`].
pub mod request_op {
    /// `RequestOp.request`.
    #[derive(Clone, PartialEq, prost::Oneof)]
    pub enum Request {
        /// `request_range`: a read.
        #[prost(message, tag = "1")]
        Range(super::RangeRequest),
        /// `request_put`: a write.
        #[prost(message, tag = "2")]
        Put(super::PutRequest),
        /// `request_delete_range`: a delete.
        #[prost(message, tag = "3")]
        DeleteRange(super::DeleteRangeRequest),
    }
}

impl RequestOp {
    /// A read in a transaction.
    pub fn range(request: RangeRequest) -> Self {
        Self {
            request: Some(request_op::Request::Range(request)),
        }
    }

    /// A write of `value` to `key` in a transaction.
    pub fn put(key: Vec<u8>, value: Vec<u8>) -> Self {
        Self {
            request: Some(request_op::Request::Put(PutRequest { key, value })),
        }
    }

    /// A delete of `key` in a transaction.
    pub fn delete(key: Vec<u8>) -> Self {
        Self {
            request: Some(request_op::Request::DeleteRange(DeleteRangeRequest { key })),
        }
    }
}

/// `etcdserverpb.ResponseOp`: the answer to one operation of the branch
/// a transaction took.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ResponseOp {
    /// The answer to a read; `None` for the answers the backend does not
    /// declare (to puts and deletes, tags 2 and 3).
    #[prost(oneof = "response_op::Response", tags = "1")]
    pub response: Option<response_op::Response>,
}

/// The `oneof` of [`ResponseOp`].
pub mod response_op {
    /// `ResponseOp.response`.
    #[derive(Clone, PartialEq, prost::Oneof)]
    pub enum Response {
        /// `response_range`: the answer to a read.
        #[prost(message, tag = "1")]
        Range(super::RangeResponse),
    }
}

/// `etcdserverpb.Compare.CompareResult`: how a compare relates the key's
/// target to the given value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
#[repr(i32)]
pub enum CompareResult {
    /// The target equals the value.
    Equal = 0,
    /// The target is greater.
    Greater = 1,
    /// The target is less.
    Less = 2,
    /// The target differs.
    NotEqual = 3,
}

/// `etcdserverpb.Compare.CompareTarget`: which property of the key a
/// compare looks at.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
#[repr(i32)]
pub enum CompareTarget {
    /// How often the key was written since it was created.
    Version = 0,
    /// The revision that created the key; 0 when it does not exist.
    Create = 1,
    /// The revision of its last write.
    Mod = 2,
    /// Its value; a missing key compares as false.
    Value = 3,
    /// Its lease.
    Lease = 4,
}

/// `etcdserverpb.Compare`: one condition of a transaction.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Compare {
    /// A [`CompareResult`].
    #[prost(enumeration = "CompareResult", tag = "1")]
    pub result: i32,
    /// A [`CompareTarget`]; must match the variant of `target_union`.
    #[prost(enumeration = "CompareTarget", tag = "2")]
    pub target: i32,
    /// The key compared.
    #[prost(bytes = "vec", tag = "3")]
    pub key: Vec<u8>,
    /// What the target is compared with (`version`, 4, `mod_revision`, 6,
    /// and `lease`, 8, are never sent).
    #[prost(oneof = "compare::TargetUnion", tags = "5, 7")]
    pub target_union: Option<compare::TargetUnion>,
}

/// The `oneof` of [`Compare`].
pub mod compare {
    /// `Compare.target_union`.
    #[derive(Clone, PartialEq, prost::Oneof)]
    pub enum TargetUnion {
        /// `create_revision`, with [`CompareTarget::Create`](super::CompareTarget::Create).
        #[prost(int64, tag = "5")]
        CreateRevision(i64),
        /// `value`, with [`CompareTarget::Value`](super::CompareTarget::Value).
        #[prost(bytes = "vec", tag = "7")]
        Value(Vec<u8>),
    }
}

impl Compare {
    /// Holds when `key` does not exist: its creation revision is 0.
    pub fn absent(key: Vec<u8>) -> Self {
        Self {
            result: CompareResult::Equal as i32,
            target: CompareTarget::Create as i32,
            key,
            target_union: Some(compare::TargetUnion::CreateRevision(0)),
        }
    }

    /// Holds when `key` exists and holds `value`.
    pub fn value_equals(key: Vec<u8>, value: Vec<u8>) -> Self {
        Self {
            result: CompareResult::Equal as i32,
            target: CompareTarget::Value as i32,
            key,
            target_union: Some(compare::TargetUnion::Value(value)),
        }
    }
}

/// `etcdserverpb.TxnRequest`: if every compare holds, the success branch,
/// else the failure branch, atomically.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TxnRequest {
    /// The conditions; all must hold.
    #[prost(message, repeated, tag = "1")]
    pub compare: Vec<Compare>,
    /// The operations when they do.
    #[prost(message, repeated, tag = "2")]
    pub success: Vec<RequestOp>,
    /// The operations when they do not.
    #[prost(message, repeated, tag = "3")]
    pub failure: Vec<RequestOp>,
}

/// `etcdserverpb.TxnResponse`: which branch ran, and its answers.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TxnResponse {
    /// The revision the transaction was evaluated at (after its writes,
    /// if it wrote).
    #[prost(message, optional, tag = "1")]
    pub header: Option<ResponseHeader>,
    /// Whether every compare held, so the success branch ran.
    #[prost(bool, tag = "2")]
    pub succeeded: bool,
    /// One answer per operation of the branch that ran, in order.
    #[prost(message, repeated, tag = "3")]
    pub responses: Vec<ResponseOp>,
}

/// `etcdserverpb.AuthenticateRequest`: a user's credentials.
#[derive(Clone, PartialEq, prost::Message)]
pub struct AuthenticateRequest {
    /// The user name.
    #[prost(string, tag = "1")]
    pub name: String,
    /// The password.
    #[prost(string, tag = "2")]
    pub password: String,
}

/// `etcdserverpb.AuthenticateResponse`: a token for the user.
#[derive(Clone, PartialEq, prost::Message)]
pub struct AuthenticateResponse {
    /// Sent with every later request, in the `token` header.
    #[prost(string, tag = "2")]
    pub token: String,
}

/// How [`Client::connect`] reaches the members. The defaults: plain
/// HTTP/2, no timeouts or keep-alive beyond tonic's, tonic's 4 MiB
/// answer limit, no credentials.
#[derive(Clone, Default)]
pub struct ConnectOptions {
    /// How long opening a connection to a member may take.
    pub connect_timeout: Option<Duration>,
    /// HTTP/2 keep-alive, even while idle: the ping interval, and how
    /// long a ping may go unanswered before the connection is closed.
    pub keep_alive: Option<(Duration, Duration)>,
    /// TLS towards every member; endpoints without a scheme then use
    /// `https`.
    pub tls: Option<ClientTlsConfig>,
    /// The largest answer accepted, in bytes.
    pub max_decoding_message_size: Option<usize>,
    /// A user name and password to authenticate with.
    pub credentials: Option<(String, String)>,
}

/// A connection to an etcd cluster, spread over all its endpoints. Cheap
/// to clone; clones share the connections and the auth token.
#[derive(Clone)]
pub struct Client {
    grpc: Grpc<Channel>,
    credentials: Option<Arc<(String, String)>>,
    token: Arc<RwLock<Option<AsciiMetadataValue>>>,
}

impl Client {
    /// A client of the members at `endpoints` (`http://host:port`,
    /// `https://host:port`, or `host:port`, whose scheme then follows
    /// whether TLS is configured). Connections are opened lazily, per
    /// request, so nothing is sent here unless there are credentials: then
    /// it authenticates.
    ///
    /// # Errors
    /// A [`Status`]: `InvalidArgument` for no endpoint or an `http`
    /// endpoint with TLS; `Unknown` for an endpoint or TLS material tonic
    /// cannot use; whatever etcd answers to authenticating.
    pub async fn connect(endpoints: &[String], options: &ConnectOptions) -> Result<Self, Status> {
        if endpoints.is_empty() {
            return Err(Status::invalid_argument("empty endpoints"));
        }
        let endpoints = endpoints
            .iter()
            .map(|url| endpoint(url, options))
            .collect::<Result<Vec<_>, _>>()?;
        // Requests are balanced over every member (power of two choices);
        // one that is down fails to connect and the request is retried by
        // the caller, while its connection keeps reconnecting.
        let (channel, changes) = Channel::balance_channel(endpoints.len());
        for endpoint in endpoints {
            // Room for every endpoint, so this never waits.
            changes
                .send(Change::Insert(endpoint.uri().clone(), endpoint))
                .await
                .map_err(|_| {
                    Status::internal("failed to insert an endpoint into the balanced channel")
                })?;
        }
        let mut grpc = Grpc::new(channel);
        if let Some(limit) = options.max_decoding_message_size {
            grpc = grpc.max_decoding_message_size(limit);
        }
        let client = Self {
            grpc,
            credentials: options.credentials.clone().map(Arc::new),
            token: Arc::new(RwLock::new(None)),
        };
        client.refresh_token().await?;
        Ok(client)
    }

    /// Whether the client authenticates.
    pub fn has_credentials(&self) -> bool {
        self.credentials.is_some()
    }

    /// Authenticates again and sends the new token from now on (without
    /// credentials, sends none).
    ///
    /// # Errors
    /// etcd's answer to authenticating, or `Internal` for a token that
    /// cannot be a header value.
    pub async fn refresh_token(&self) -> Result<(), Status> {
        let token = match &self.credentials {
            Some(credentials) => {
                let (name, password) = credentials.as_ref().clone();
                let answer: AuthenticateResponse = self
                    .unary(AUTHENTICATE, AuthenticateRequest { name, password }, false)
                    .await?;
                let token = AsciiMetadataValue::try_from(answer.token).map_err(|e| {
                    Status::internal(format!("etcd issued an auth token that is not ASCII: {e}"))
                })?;
                Some(token)
            }
            None => None,
        };
        *self.token.write().unwrap_or_else(PoisonError::into_inner) = token;
        Ok(())
    }

    /// `KV.Range`: reads a key or a range.
    ///
    /// # Errors
    /// The call's [`Status`], as tonic reports it.
    pub async fn range(&self, request: RangeRequest) -> Result<RangeResponse, Status> {
        self.unary(RANGE, request, true).await
    }

    /// `KV.Txn`: runs a transaction.
    ///
    /// # Errors
    /// The call's [`Status`], as tonic reports it.
    pub async fn txn(&self, request: TxnRequest) -> Result<TxnResponse, Status> {
        self.unary(TXN, request, true).await
    }

    /// Sends `message` to the method at `path` and decodes the answer,
    /// with the auth token when `with_token` and there is one.
    async fn unary<Q, A>(
        &self,
        path: &'static str,
        message: Q,
        with_token: bool,
    ) -> Result<A, Status>
    where
        Q: prost::Message + Send + Sync + 'static,
        A: prost::Message + Default + Send + Sync + 'static,
    {
        let mut request = Request::new(message);
        if with_token {
            let token = self
                .token
                .read()
                .unwrap_or_else(PoisonError::into_inner)
                .clone();
            if let Some(token) = token {
                request.metadata_mut().insert(TOKEN_HEADER, token);
            }
        }
        // `Grpc::unary` takes `&mut self`; a clone shares the channel.
        let mut grpc = self.grpc.clone();
        // The channel's buffer needs a slot reserved before each call.
        // Its error is the buffer's, not the request's (tonic's generated
        // clients report it the same way).
        grpc.ready()
            .await
            .map_err(|e| Status::unknown(format!("Service was not ready: {e}")))?;
        let answer = grpc
            .unary(
                request,
                PathAndQuery::from_static(path),
                ProstCodec::<Q, A>::default(),
            )
            .await?;
        Ok(answer.into_inner())
    }
}

/// The tonic endpoint for `url`, with the options' timeouts and TLS.
fn endpoint(url: &str, options: &ConnectOptions) -> Result<Endpoint, Status> {
    // Setting up an endpoint sends nothing; tonic's error keeps its causes.
    let unusable = |e: tonic::transport::Error| Status::from_error(Box::new(e));
    let mut endpoint = if url.starts_with("http://") {
        if options.tls.is_some() {
            return Err(Status::invalid_argument(
                "TLS options are only supported with HTTPS URLs",
            ));
        }
        Endpoint::from_shared(url.to_owned()).map_err(unusable)?
    } else if url.starts_with("https://") {
        let tls = options.tls.clone().unwrap_or_default();
        Endpoint::from_shared(url.to_owned())
            .and_then(|endpoint| endpoint.tls_config(tls))
            .map_err(unusable)?
    } else {
        match &options.tls {
            Some(tls) => Endpoint::from_shared(format!("https://{url}"))
                .and_then(|endpoint| endpoint.tls_config(tls.clone()))
                .map_err(unusable)?,
            None => Endpoint::from_shared(format!("http://{url}")).map_err(unusable)?,
        }
    };
    if let Some((interval, timeout)) = options.keep_alive {
        endpoint = endpoint
            .keep_alive_while_idle(true)
            .http2_keep_alive_interval(interval)
            .keep_alive_timeout(timeout);
    }
    if let Some(timeout) = options.connect_timeout {
        endpoint = endpoint.connect_timeout(timeout);
    }
    Ok(endpoint)
}

/// The `Auth` calls the tests use to set up a cluster with auth; the
/// answers' content (a header) is not read.
#[cfg(test)]
pub mod admin {
    use super::{Client, Status};

    /// `etcdserverpb.AuthEnableRequest`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct AuthEnableRequest {}

    /// `etcdserverpb.AuthDisableRequest`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct AuthDisableRequest {}

    /// `etcdserverpb.AuthUserAddRequest`, without options: the user has
    /// a password.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct AuthUserAddRequest {
        /// The user name.
        #[prost(string, tag = "1")]
        pub name: String,
        /// The password.
        #[prost(string, tag = "2")]
        pub password: String,
    }

    /// `etcdserverpb.AuthUserGrantRoleRequest`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct AuthUserGrantRoleRequest {
        /// The user name.
        #[prost(string, tag = "1")]
        pub user: String,
        /// The role granted.
        #[prost(string, tag = "2")]
        pub role: String,
    }

    /// Any of the answers above, whose only field is a header.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Answered {}

    impl Client {
        /// `Auth.UserAdd`.
        pub async fn user_add(&self, name: &str, password: &str) -> Result<(), Status> {
            let request = AuthUserAddRequest {
                name: name.into(),
                password: password.into(),
            };
            self.admin("/etcdserverpb.Auth/UserAdd", request).await
        }

        /// `Auth.UserGrantRole`.
        pub async fn user_grant_role(&self, user: &str, role: &str) -> Result<(), Status> {
            let request = AuthUserGrantRoleRequest {
                user: user.into(),
                role: role.into(),
            };
            self.admin("/etcdserverpb.Auth/UserGrantRole", request)
                .await
        }

        /// `Auth.AuthEnable`.
        pub async fn auth_enable(&self) -> Result<(), Status> {
            self.admin("/etcdserverpb.Auth/AuthEnable", AuthEnableRequest {})
                .await
        }

        /// `Auth.AuthDisable`.
        pub async fn auth_disable(&self) -> Result<(), Status> {
            self.admin("/etcdserverpb.Auth/AuthDisable", AuthDisableRequest {})
                .await
        }

        /// Sends `request` to the `Auth` method at `path`, with the
        /// token; only whether it failed matters.
        async fn admin<Q>(&self, path: &'static str, request: Q) -> Result<(), Status>
        where
            Q: prost::Message + Send + Sync + 'static,
        {
            self.unary::<Q, Answered>(path, request, true)
                .await
                .map(drop)
        }
    }
}

#[cfg(test)]
mod tests {
    use prost::Message;

    use super::*;

    /// The bytes etcd's generated code sends for these messages, worked
    /// out by hand from the protobuf encoding: (tag << 3 | wire type),
    /// then the varint or the length and bytes.
    #[test]
    fn messages_encode_with_etcds_field_numbers() {
        let txn = TxnRequest {
            compare: vec![
                Compare::absent(b"a".to_vec()),
                Compare::value_equals(b"b".to_vec(), b"v".to_vec()),
            ],
            success: vec![
                RequestOp::put(b"k".to_vec(), b"x".to_vec()),
                RequestOp::delete(b"d".to_vec()),
            ],
            failure: vec![RequestOp::range(RangeRequest {
                key: b"r".to_vec(),
                range_end: b"s".to_vec(),
                limit: 2,
                revision: 7,
            })],
        };
        #[rustfmt::skip]
        let want: Vec<u8> = [
            // compare (1): target CREATE (2 = 1), key (3), create_revision (5 = 0).
            &[0x0a, 7, 0x10, 1, 0x1a, 1, b'a', 0x28, 0][..],
            // compare (1): target VALUE (2 = 3), key (3), value (7).
            &[0x0a, 8, 0x10, 3, 0x1a, 1, b'b', 0x3a, 1, b'v'],
            // success (2): request_put (2): key (1), value (2).
            &[0x12, 8, 0x12, 6, 0x0a, 1, b'k', 0x12, 1, b'x'],
            // success (2): request_delete_range (3): key (1).
            &[0x12, 5, 0x1a, 3, 0x0a, 1, b'd'],
            // failure (3): request_range (1): key, range_end, limit, revision.
            &[0x1a, 12, 0x0a, 10, 0x0a, 1, b'r', 0x12, 1, b's', 0x18, 2, 0x20, 7],
        ]
        .concat();
        assert_eq!(txn.encode_to_vec(), want);
        assert_eq!(TxnRequest::decode(&want[..]), Ok(txn));
    }

    #[test]
    fn answers_decode_skipping_the_fields_not_declared() {
        #[rustfmt::skip]
        let bytes: Vec<u8> = [
            // header (1): cluster_id (1), member_id (2), revision (3), raft_term (4).
            &[0x0a, 8, 0x08, 1, 0x10, 2, 0x18, 42, 0x20, 3][..],
            // succeeded (2).
            &[0x10, 1],
            // responses (3): response_range (1): header, kvs (2): key (1),
            // create_revision (2), mod_revision (3), version (4), value (5);
            // more (3), count (4).
            &[0x1a, 25, 0x0a, 23, 0x0a, 2, 0x18, 42, 0x12, 13,
              0x0a, 1, b'k', 0x10, 5, 0x18, 6, 0x20, 1, 0x2a, 2, b'v', b'1',
              0x18, 1, 0x20, 9],
            // responses (3): response_put (2) with a header: not declared.
            &[0x1a, 6, 0x12, 4, 0x0a, 2, 0x18, 42],
        ]
        .concat();
        let answer = TxnResponse::decode(&bytes[..]).expect("decodes");
        let want = TxnResponse {
            header: Some(ResponseHeader { revision: 42 }),
            succeeded: true,
            responses: vec![
                ResponseOp {
                    response: Some(response_op::Response::Range(RangeResponse {
                        header: Some(ResponseHeader { revision: 42 }),
                        kvs: vec![KeyValue {
                            key: b"k".to_vec(),
                            value: b"v1".to_vec(),
                        }],
                        more: true,
                    })),
                },
                ResponseOp { response: None },
            ],
        };
        assert_eq!(answer, want);
    }
}
