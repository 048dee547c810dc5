"""A port forward, as `ssh -L` makes one: listen on HOST:PORT, pass each
connection on to TO_HOST:TO_PORT, both ways, until LIFETIME seconds passed
(every wait bounded). Usage: tcp_forward.py HOST PORT TO_HOST TO_PORT LIFETIME"""
import socket
import sys
import threading
import time


def pump(src, dst):
    try:
        while True:
            b = src.recv(65536)
            if not b:
                break
            dst.sendall(b)
    except OSError:
        pass
    for s in (src, dst):
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def main():
    host, port, to_host, to_port, life = sys.argv[1:6]
    end = time.monotonic() + float(life)
    lsock = socket.create_server((host, int(port)),
                                 family=socket.AF_INET6 if ":" in host else socket.AF_INET)
    lsock.settimeout(0.5)
    print("listening", flush=True)
    while time.monotonic() < end:
        try:
            c, _ = lsock.accept()
        except socket.timeout:
            continue
        try:
            u = socket.create_connection((to_host, int(to_port)), timeout=10)
        except OSError:
            c.close()
            continue
        for a, b in ((c, u), (u, c)):
            threading.Thread(target=pump, args=(a, b), daemon=True).start()


if __name__ == "__main__":
    main()
