"""A Redis server with an HTTP side port that says who leads, as Patroni's
/primary does for PostgreSQL: GET /primary answers 200 while the Redis it
runs is a primary (ROLE says master) and 503 otherwise.

    python3 primary.py ADMIN_PORT REDIS_PORT redis-server [args...]

It runs the server as its child and exits when the server does; both are in
the node's process group, so a kill or a pause reaches them together."""

import http.server
import socket
import subprocess
import sys
import threading


def role(port):
    """The first element of Redis's ROLE reply ("master", "slave")."""
    with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
        s.sendall(b"ROLE\r\n")
        reply = b""
        while reply.count(b"\r\n") < 3:
            chunk = s.recv(256)
            if not chunk:
                break
            reply += chunk
    # *3\r\n$6\r\nmaster\r\n...
    parts = reply.split(b"\r\n")
    return parts[2].decode() if len(parts) > 2 else ""


def main():
    admin, port, argv = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3:]
    server_proc = subprocess.Popen(argv)

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            try:
                leads = self.path == "/primary" and role(port) == "master"
            except OSError:
                leads = False
            self.send_response(200 if leads else 503)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args):
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", admin), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    sys.exit(server_proc.wait())


if __name__ == "__main__":
    main()
