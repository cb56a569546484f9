"""A rate limit service that answers OK to everything: the plumbing check of benches/rls.sh.

    python rls_stub.py PORT COUNT_FILE

grpcio with the protos Envoy publishes (xds-protos), on 127.0.0.1:PORT, cleartext HTTP/2.
It answers every ShouldRateLimit with OK and one OK status per descriptor, and counts the calls
and descriptors it parsed; on SIGTERM it writes "CALLS DESCRIPTORS" to COUNT_FILE and exits.
So rls.sh proves with it, before any real server is measured, that h2load's prepared body is
a RateLimitRequest a gRPC server reads (the count matches what h2load says succeeded), and
that the CPU it reads from /proc is the server's. Not a limiter, and not a figure to compare.
"""

import signal
import sys
import threading
from concurrent import futures

import grpc
from envoy.service.ratelimit.v3 import rls_pb2, rls_pb2_grpc

calls = 0
descriptors = 0
lock = threading.Lock()


class Stub(rls_pb2_grpc.RateLimitServiceServicer):
    def ShouldRateLimit(self, request, context):
        global calls, descriptors
        if not request.domain or not request.descriptors:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "empty domain or no descriptors")
        with lock:
            calls += 1
            descriptors += len(request.descriptors)
        ok = rls_pb2.RateLimitResponse.OK
        return rls_pb2.RateLimitResponse(
            overall_code=ok,
            statuses=[rls_pb2.RateLimitResponse.DescriptorStatus(code=ok) for _ in request.descriptors],
        )


def main():
    port, count_file = sys.argv[1], sys.argv[2]
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    rls_pb2_grpc.add_RateLimitServiceServicer_to_server(Stub(), server)
    server.add_insecure_port("127.0.0.1:" + port)
    server.start()
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    done.wait()
    server.stop(0)
    with lock, open(count_file, "w") as f:
        f.write("%d %d\n" % (calls, descriptors))


if __name__ == "__main__":
    main()
