"""A webhook service on loopback for the alert tests: a real HTTP server that keeps every
POST it receives, shared by the sink's tests and the multi-rank ones."""
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

SECRET = "s3cr3t-token"


class Webhook:
    """A webhook service on loopback: keeps every POST; ``delay_s`` before answering,
    ``status`` answered."""

    def __init__(self, delay_s=0.0, status=200):
        self.posts, self.arrived = [], threading.Condition()
        self.release = threading.Event()        # ends a delayed answer early (teardown)
        hook = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                with hook.arrived:
                    hook.posts.append({"path": self.path, "type": self.headers["Content-Type"],
                                       "body": json.loads(body.decode("utf-8"))})
                    hook.arrived.notify_all()
                hook.release.wait(delay_s)
                self.send_response(status)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_port}/hook?access_token={SECRET}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def wait_for(self, count, timeout=10.0):
        with self.arrived:
            self.arrived.wait_for(lambda: len(self.posts) >= count, timeout)
        return [post["body"] for post in self.posts]

    def close(self):
        self.release.set()
        self.server.shutdown()
        self.server.server_close()
