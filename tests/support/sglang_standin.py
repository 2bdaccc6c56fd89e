"""A stand-in for `python -m sglang.launch_server` (tests/server/test_sglang_launch.py installs it
as sglang/launch_server.py in a fake site folder): prints SGLang's start-up lines, then serves
/health, /v1/models, /server_info, /metrics with SGLang's metric names and a completion
(streamed or not) of `max_tokens` one-token chunks, on 127.0.0.1 only."""

import argparse
import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

parser = argparse.ArgumentParser()
for flag in (
    "--model-path",
    "--served-model-name",
    "--host",
    "--port",
    "--page-size",
    "--max-running-requests",
    "--chunked-prefill-size",
):
    parser.add_argument(flag)
parser.add_argument("--enable-metrics", action="store_true")
parser.add_argument("--disable-radix-cache", action="store_true")
args = parser.parse_args()
print("argv " + json.dumps(sys.argv[1:]), flush=True)
print(
    f"server_args=ServerArgs(model_path='{args.model_path}', page_size={args.page_size or 1}, "
    "attention_backend='fa3')",
    flush=True,
)
print(
    f"max_total_num_tokens=65536, chunked_prefill_size={args.chunked_prefill_size or 8192}, "
    f"max_prefill_tokens=16384, max_running_requests={args.max_running_requests or 4096}, "
    "context_len=8192, available_gpu_mem=20.00 GB",
    flush=True,
)
STATE = {"running": 0, "waiting": 0, "prompt": 0, "generation": 0}
LOCK = threading.Lock()
# At most --max-running-requests run at once; the rest wait in the queue, as in SGLang.
SEATS = threading.Semaphore(int(args.max_running_requests or 4096))
NAME = args.served_model_name
LABELS = f'model_name="{NAME}",engine_type="unified",tp_rank="0",pp_rank="0"'


def exposition() -> str:
    # Names, types and labels as python/sglang/srt/observability/metrics_collector.py has them.
    with LOCK:
        s = dict(STATE)
    return "".join(
        (
            "# TYPE sglang:num_running_reqs gauge\n",
            f"sglang:num_running_reqs{{{LABELS}}} {s['running']}.0\n",
            "# TYPE sglang:num_queue_reqs gauge\n",
            f"sglang:num_queue_reqs{{{LABELS}}} {s['waiting']}.0\n",
            "# TYPE sglang:token_usage gauge\n",
            f"sglang:token_usage{{{LABELS}}} {s['running'] * 0.01}\n",
            "# TYPE sglang:gen_throughput gauge\n",
            f"sglang:gen_throughput{{{LABELS}}} 1000.0\n",
            "# TYPE sglang:cache_hit_rate gauge\n",
            f"sglang:cache_hit_rate{{{LABELS}}} 0.0\n",
            "# TYPE sglang:prompt_tokens_total counter\n",
            f'sglang:prompt_tokens_total{{{LABELS},is_streaming="true"}} {s["prompt"]}.0\n',
            "# TYPE sglang:generation_tokens_total counter\n",
            f'sglang:generation_tokens_total{{{LABELS},is_streaming="true"}} {s["generation"]}.0\n',
            "# TYPE sglang:num_retracted_requests_total counter\n",
            f"sglang:num_retracted_requests_total{{{LABELS}}} 0.0\n",
        )
    )


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def send(self, status, body, ctype="application/json"):
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        if self.path == "/health":
            self.send(200, b"")
        elif self.path == "/v1/models":
            self.send(200, json.dumps({"data": [{"id": args.served_model_name}]}).encode())
        elif self.path == "/server_info":
            info = {
                "page_size": int(args.page_size or 1),
                "context_length": None,
                "max_running_requests": int(args.max_running_requests or 0) or None,
                "internal_states": [{"max_total_num_tokens": 65536}],
                "version": "0.5.23",
            }
            self.send(200, json.dumps(info).encode())
        elif self.path == "/metrics":
            self.send(200, exposition().encode(), "text/plain; version=0.0.4")
        else:
            self.send(404, b"{}")

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.path in ("/tokenize", "/v1/tokenize"):
            # SGLang's TokenizeResponse (entrypoints/openai/protocol.py): tokens, count,
            # max_model_len; one token a word here.
            words = (body.get("prompt") or json.dumps(body.get("messages"))).split()
            reply = {"tokens": list(range(len(words))), "count": len(words), "max_model_len": 8192}
            self.send(200, json.dumps(reply).encode())
            return
        n = int(body.get("max_tokens") or 16)
        prompt = body.get("prompt") or ""
        prompt_tokens = max(1, len(prompt) // 4)
        with LOCK:
            STATE["waiting"] += 1
        SEATS.acquire()
        with LOCK:
            STATE["waiting"] -= 1
            STATE["running"] += 1
        usage = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": n,
            "total_tokens": prompt_tokens + n,
        }
        try:
            if not body.get("stream"):
                reply = {"choices": [{"text": "x" * n, "finish_reason": "length"}], "usage": usage}
                self.send(200, json.dumps(reply).encode())
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Connection", "close")
            self.end_headers()
            for i in range(n):
                chunk = {"choices": [{"index": 0, "text": " x", "finish_reason": None}]}
                if (body.get("stream_options") or {}).get("continuous_usage_stats"):
                    chunk["usage"] = {**usage, "completion_tokens": i + 1}
                self.wfile.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
                self.wfile.flush()
                time.sleep(0.005)  # 40 tokens: 0.2 s, ten polls at 20 ms
            final = {"choices": [], "usage": usage}
            self.wfile.write(b"data: " + json.dumps(final).encode() + b"\n\ndata: [DONE]\n\n")
            self.wfile.flush()
            self.close_connection = True
        finally:
            SEATS.release()
            with LOCK:  # SGLang counts a request's tokens when it finishes
                STATE["running"] -= 1
                STATE["prompt"] += prompt_tokens
                STATE["generation"] += n

    def log_message(self, *a):
        pass


ThreadingHTTPServer((args.host, int(args.port)), Handler).serve_forever()
