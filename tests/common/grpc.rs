//! gRPC for tests without a schema: a codec of raw bytes, an echo service, and a unary
//! call with tonic's own client (tests/proxy/grpc.rs through the gateway, tests/layer/tonic.rs
//! in a tonic server).

use std::net::SocketAddr;

use bytes::{Buf, BufMut, Bytes};
use http::uri::PathAndQuery;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::{Request, Response, Status};

/// Messages as raw bytes: no schema needed to speak gRPC's framing.
#[derive(Clone, Copy, Default)]
pub struct Raw;

impl Codec for Raw {
    type Encode = Bytes;
    type Decode = Bytes;
    type Encoder = Raw;
    type Decoder = Raw;
    fn encoder(&mut self) -> Raw {
        Raw
    }
    fn decoder(&mut self) -> Raw {
        Raw
    }
}

impl Encoder for Raw {
    type Item = Bytes;
    type Error = Status;
    fn encode(&mut self, item: Bytes, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        dst.put(item);
        Ok(())
    }
}

impl Decoder for Raw {
    type Item = Bytes;
    type Error = Status;
    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Bytes>, Status> {
        Ok(Some(src.copy_to_bytes(src.remaining())))
    }
}

/// Answers `hello: <message>`, or NOT_FOUND for the message `missing`.
#[derive(Clone)]
pub struct Echo;

impl tonic::server::UnaryService<Bytes> for Echo {
    type Response = Bytes;
    type Future = std::future::Ready<Result<Response<Bytes>, Status>>;
    fn call(&mut self, req: Request<Bytes>) -> Self::Future {
        let msg = req.into_inner();
        std::future::ready(if &msg[..] == b"missing" {
            Err(Status::not_found("no such thing"))
        } else {
            Ok(Response::new(Bytes::from(
                [&b"hello: "[..], &msg[..]].concat(),
            )))
        })
    }
}

/// One unary `/echo.Echo/Say` call of `msg` to `server` (h2c), on a fresh channel.
pub async fn call(gateway: SocketAddr, msg: &'static [u8]) -> Result<Response<Bytes>, Status> {
    let channel = tonic::transport::Channel::from_shared(format!("http://{gateway}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut client = tonic::client::Grpc::new(channel);
    client.ready().await.unwrap();
    let path = PathAndQuery::from_static("/echo.Echo/Say");
    client
        .unary(Request::new(Bytes::from_static(msg)), path, Raw)
        .await
}
