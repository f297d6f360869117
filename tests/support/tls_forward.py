"""A loopback TLS front for the test model server: terminates TLS with the given certificate
and key and forwards the bytes to 127.0.0.1:<backend>. Prints its port, then serves until
killed. Test-only (tests/network.rs)."""
import socket
import ssl
import sys
import threading

cert, key, backend = sys.argv[1], sys.argv[2], int(sys.argv[3])
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(cert, key)
listener = socket.socket()
listener.bind(("127.0.0.1", 0))
listener.listen(16)
print(listener.getsockname()[1], flush=True)


def pump(src, dst):
    try:
        while True:
            data = src.recv(65536)
            if not data:
                break
            dst.sendall(data)
    except OSError:
        pass
    for s in (src, dst):
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def serve(raw):
    try:
        conn = ctx.wrap_socket(raw, server_side=True)
    except (ssl.SSLError, OSError):
        # A client that does not trust us hangs up in the handshake.
        raw.close()
        return
    up = socket.create_connection(("127.0.0.1", backend))
    threading.Thread(target=pump, args=(up, conn), daemon=True).start()
    pump(conn, up)


while True:
    raw, _ = listener.accept()
    threading.Thread(target=serve, args=(raw,), daemon=True).start()
