"""A real OTLP/gRPC trace receiver for tests/proxy/trace.rs, built from the
opentelemetry-proto package's generated service (grpcio serves it).

It listens on a free loopback port and prints `PORT <n>` first, then one JSON line per
span it is sent: ids as hex, the span's name, kind, attributes and the resource's
service.name. A span's line is written and flushed before the export is answered, so a
gateway that has stopped (its exporter flushed) has had every span printed.
"""

import json
import sys
from concurrent import futures

import grpc
from opentelemetry.proto.collector.trace.v1 import (
    trace_service_pb2,
    trace_service_pb2_grpc,
)


def value(v):
    kind = v.WhichOneof("value")
    return getattr(v, kind) if kind else None


class Receiver(trace_service_pb2_grpc.TraceServiceServicer):
    def Export(self, request, context):
        for rs in request.resource_spans:
            resource = {a.key: value(a.value) for a in rs.resource.attributes}
            for ss in rs.scope_spans:
                for s in ss.spans:
                    line = {
                        "service": resource.get("service.name"),
                        "trace_id": s.trace_id.hex(),
                        "span_id": s.span_id.hex(),
                        "parent_span_id": s.parent_span_id.hex(),
                        "name": s.name,
                        "kind": s.kind,
                        "status": s.status.code,
                        "attributes": {a.key: value(a.value) for a in s.attributes},
                    }
                    sys.stdout.write(json.dumps(line) + "\n")
        sys.stdout.flush()
        return trace_service_pb2.ExportTraceServiceResponse()


def main():
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Receiver(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    sys.stdout.write(f"PORT {port}\n")
    sys.stdout.flush()
    server.wait_for_termination()


if __name__ == "__main__":
    main()
