"""A client of Envoy's rate limit service that tollgate did not write: grpcio with the
protos Envoy publishes (PyPI xds-protos). The Rust tests (tests/common/rls.rs) start it
with the address to call and write one JSON command per line on its stdin; it writes one
JSON answer per line on its stdout:

  {"call": "should_rate_limit", "request": {...RateLimitRequest as proto JSON...}}
      -> {"response": {...RateLimitResponse as proto JSON, field names as in the proto...}}
      or {"error": {"code": "INVALID_ARGUMENT", "details": "..."}}
  {"call": "health", "service": ""}
      -> {"status": "SERVING"} (grpc.health.v1.Health/Check)

With a second argument, a PEM certificate file, it calls over TLS and trusts that
certificate, for the name `localhost`.
"""

import json
import sys

import grpc
from envoy.service.ratelimit.v3 import rls_pb2, rls_pb2_grpc
from google.protobuf import json_format


def health_request(service):
    # grpc.health.v1.HealthCheckRequest{service = 1} written by hand: the health protos
    # (grpcio-health-checking) are not in this environment, and the message is one string.
    data = service.encode()
    if not data:
        return b""
    return b"\x0a" + bytes([len(data)]) + data


def health_status(reply):
    # HealthCheckResponse{status = 1}: field 1, varint. Absent means UNKNOWN (0).
    names = {0: "UNKNOWN", 1: "SERVING", 2: "NOT_SERVING", 3: "SERVICE_UNKNOWN"}
    if len(reply) >= 2 and reply[0] == 0x08:
        return names.get(reply[1], str(reply[1]))
    return names[0]


def main():
    if len(sys.argv) > 2:
        with open(sys.argv[2], "rb") as f:
            roots = f.read()
        credentials = grpc.ssl_channel_credentials(root_certificates=roots)
        options = [("grpc.ssl_target_name_override", "localhost")]
        channel = grpc.secure_channel(sys.argv[1], credentials, options)
    else:
        channel = grpc.insecure_channel(sys.argv[1])
    stub = rls_pb2_grpc.RateLimitServiceStub(channel)
    check = channel.unary_unary(
        "/grpc.health.v1.Health/Check",
        request_serializer=lambda b: b,
        response_deserializer=lambda b: b,
    )
    for line in sys.stdin:
        command = json.loads(line)
        try:
            if command["call"] == "health":
                reply = check(health_request(command.get("service", "")), timeout=10)
                answer = {"status": health_status(reply)}
            else:
                request = json_format.ParseDict(command["request"], rls_pb2.RateLimitRequest())
                response = stub.ShouldRateLimit(request, timeout=10)
                answer = {
                    "response": json_format.MessageToDict(
                        response, preserving_proto_field_name=True
                    )
                }
        except grpc.RpcError as e:
            answer = {"error": {"code": e.code().name, "details": e.details()}}
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
