"""An https front for the test schema registry that demands basic auth, as a production
registry behind TLS does. Forwards every request to the plain-http upstream unchanged.

    registry_tls_proxy.py --upstream http://127.0.0.1:8081 --cert server.crt --key server.key \
        --user kubefacts --password-file pw

Prints the port it listens on (127.0.0.1, chosen by the OS) on its first line, then serves
until killed. Requests without the right credentials get 401 and never reach upstream.
"""
import argparse
import base64
import http.server
import ssl
import sys
import urllib.error
import urllib.request


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--upstream", required=True)
    ap.add_argument("--cert", required=True)
    ap.add_argument("--key", required=True)
    ap.add_argument("--user", required=True)
    ap.add_argument("--password-file", required=True)
    args = ap.parse_args()
    with open(args.password_file, encoding="utf-8") as f:
        password = f.read().rstrip("\r\n")
    expected = "Basic " + base64.b64encode(f"{args.user}:{password}".encode()).decode()
    upstream = args.upstream.rstrip("/")

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *_):  # quiet: the test reads its own output
            pass

        def forward(self) -> None:
            if self.headers.get("Authorization") != expected:
                self.send_response(401)
                self.send_header("WWW-Authenticate", 'Basic realm="registry"')
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else None
            req = urllib.request.Request(upstream + self.path, data=body, method=self.command)
            for h in ("Content-Type", "Accept"):
                if self.headers.get(h):
                    req.add_header(h, self.headers[h])
            try:
                with urllib.request.urlopen(req, timeout=30) as resp:
                    status, data, ctype = resp.status, resp.read(), resp.headers.get("Content-Type")
            except urllib.error.HTTPError as e:
                status, data, ctype = e.code, e.read(), e.headers.get("Content-Type")
            self.send_response(status)
            if ctype:
                self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_PUT = do_DELETE = forward

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(args.cert, args.key)
    server.socket = ctx.wrap_socket(server.socket, server_side=True)
    print(server.server_address[1], flush=True)
    sys.stdout.close()
    server.serve_forever()


if __name__ == "__main__":
    main()
