"""OpenAI-compatible upstreams on one loopback port, for the worked examples:
/overloaded/v1 answers 503 with an OpenAI-shaped error, /ok/v1 answers a chat
completion naming the model it was asked for. Prints the port, serves until killed.

    python3 mock_openai.py
"""
import http.server
import json


class Handler(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers.get("content-length", "0"))) or b"{}")
        if self.path.startswith("/overloaded/"):
            status, reply = 503, {"error": {"message": "The engine is currently overloaded", "type": "server_error",
                                            "code": "overloaded"}}
        else:
            status, reply = 200, {"id": "chatcmpl-1", "object": "chat.completion", "model": body.get("model", ""),
                                  "choices": [{"index": 0, "finish_reason": "stop",
                                               "message": {"role": "assistant",
                                                           "content": f"hello from {body.get('model', '')}"}}]}
        data = json.dumps(reply).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
print(server.server_address[1], flush=True)
server.serve_forever()
