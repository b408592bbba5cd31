"""An OTLP receiver for the telemetry tests, built on the protocol's official protobuf
definitions (PyPI's opentelemetry-proto, with grpcio for gRPC).

It listens on 127.0.0.1 for gRPC (the trace and metrics services) and for HTTP
(`POST /v1/traces`, `POST /v1/metrics`, protobuf or JSON bodies, gzip or plain) and
decodes every export strictly: a body that is not a valid export request is answered 400
and reported. Prints one JSON line first, `{"grpc": PORT, "http": PORT}`, then one per
export received:

    {"protocol": "grpc" | "http/protobuf" | "http/json", "signal": "traces" | "metrics",
     "path": ..., "headers": {lower-case name: value}, "encoding": "gzip" | null,
     "body": the request as OTLP/JSON (ids in hex), "error": null | why it was refused}
"""

import base64
import gzip
import json
import sys
import threading
from concurrent import futures
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import grpc
from google.protobuf import json_format
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2, metrics_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

SIGNALS = {
    "/v1/traces": (
        "traces",
        trace_service_pb2.ExportTraceServiceRequest,
        trace_service_pb2.ExportTraceServiceResponse,
    ),
    "/v1/metrics": (
        "metrics",
        metrics_service_pb2.ExportMetricsServiceRequest,
        metrics_service_pb2.ExportMetricsServiceResponse,
    ),
}
ID_FIELDS = ("traceId", "spanId", "parentSpanId")
printing = threading.Lock()


def emit(record):
    with printing:
        sys.stdout.write(json.dumps(record) + "\n")
        sys.stdout.flush()


def ids(value, convert):
    """OTLP/JSON writes trace and span ids in hex where protobuf's JSON mapping uses
    base64: converts every id in `value` with `convert`."""
    if isinstance(value, dict):
        return {
            k: (convert(v) if k in ID_FIELDS and isinstance(v, str) else ids(v, convert))
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [ids(v, convert) for v in value]
    return value


def as_json(message):
    return ids(json_format.MessageToDict(message), lambda v: base64.b64decode(v).hex())


class Traces(trace_service_pb2_grpc.TraceServiceServicer):
    def Export(self, request, context):
        emit({
            "protocol": "grpc", "signal": "traces", "path": "TraceService/Export",
            "headers": dict(context.invocation_metadata()), "encoding": None,
            "body": as_json(request), "error": None,
        })
        return trace_service_pb2.ExportTraceServiceResponse()


class Metrics(metrics_service_pb2_grpc.MetricsServiceServicer):
    def Export(self, request, context):
        emit({
            "protocol": "grpc", "signal": "metrics", "path": "MetricsService/Export",
            "headers": dict(context.invocation_metadata()), "encoding": None,
            "body": as_json(request), "error": None,
        })
        return metrics_service_pb2.ExportMetricsServiceResponse()


class Http(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_POST(self):
        raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        headers = {k.lower(): v for k, v in self.headers.items()}
        encoding = headers.get("content-encoding")
        kind = headers.get("content-type", "").split(";")[0].strip()
        protocol = {"application/x-protobuf": "http/protobuf", "application/json": "http/json"}.get(kind)
        record = {"protocol": protocol, "signal": None, "path": self.path, "headers": headers,
                  "encoding": encoding, "body": None, "error": None}
        try:
            if self.path not in SIGNALS:
                raise ValueError(f"no such OTLP path {self.path}")
            signal, request_type, response_type = SIGNALS[self.path]
            record["signal"] = signal
            if encoding == "gzip":
                raw = gzip.decompress(raw)
            elif encoding not in (None, "identity"):
                raise ValueError(f"unknown Content-Encoding {encoding}")
            request = request_type()
            if protocol == "http/protobuf":
                request.ParseFromString(raw)
            elif protocol == "http/json":
                hexed = json.loads(raw)
                json_format.ParseDict(
                    ids(hexed, lambda v: base64.b64encode(bytes.fromhex(v)).decode()), request
                )
            else:
                raise ValueError(f"unknown Content-Type {kind!r}")
            record["body"] = as_json(request)
            response = response_type()
            if protocol == "http/json":
                answer, answer_type = json_format.MessageToJson(response).encode(), "application/json"
            else:
                answer, answer_type = response.SerializeToString(), "application/x-protobuf"
            status = 200
        except Exception as e:  # refused, and reported to the test
            record["error"] = f"{type(e).__name__}: {e}"
            answer, answer_type, status = str(e).encode(), "text/plain", 400
        emit(record)
        self.send_response(status)
        self.send_header("Content-Type", answer_type)
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)


class Quiet(ThreadingHTTPServer):
    def handle_error(self, request, client_address):
        pass  # a connection toolhost dropped as it stopped


def main():
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Traces(), server)
    metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server(Metrics(), server)
    grpc_port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    http = Quiet(("127.0.0.1", 0), Http)
    emit({"grpc": grpc_port, "http": http.server_address[1]})
    threading.Thread(target=http.serve_forever, daemon=True).start()
    # Until the test closes stdin (or dies).
    sys.stdin.read()
    server.stop(0)


if __name__ == "__main__":
    main()
