"""A fake Redis for the prefix cache's second tier (tools/store/store.c), python3 standard library
only: a socket server on a loopback port that speaks enough RESP for what store.c sends, and
answers a lookup the way a slow or lying server would (tests/serve/test_serve_store.py,
bench/store_attacks.py)."""

import select
import socket
import threading
import time

# a lookup's reply sent one byte every 40 ms: an index listing three entries (about 3.2 s)
MEMBER = b"70:0123456789abcdef"
DRIP_REPLY = b"*3\r\n" + (b"$%d\r\n%s\r\n" % (len(MEMBER), MEMBER)) * 3
DRIP_EVERY_S = 0.04


class FakeRedis:
    """Answers SELECT, SET, SADD, EXPIRE (OK), GET (nil) and SMEMBERS (an empty set) until
    .attack is set; then the next SMEMBERS (every one with always=True) gets "drip": DRIP_REPLY
    one byte every 40 ms, or "huge": the header of an array of two billion members and nothing
    more. .held: for each attack, the seconds from its command to the client closing the
    connection (None while it holds on, or when the drip ended first); .asked: the SMEMBERS
    received (the lookups that reached the server)."""

    def __init__(self, attack=None, always=False):
        self.attack, self.always, self.held, self.asked = attack, always, [], 0
        self.lock = threading.Lock()
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.url = "redis://127.0.0.1:%d" % self.sock.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(c,), daemon=True).start()

    @staticmethod
    def _command(buf):
        """The first whole command in buf (a RESP array of bulk strings) and the rest."""
        end = buf.find(b"\r\n")
        if end < 0:
            return None, buf
        n, at, args = int(buf[1:end]), end + 2, []
        for _ in range(n):
            end = buf.find(b"\r\n", at)
            if end < 0:
                return None, buf
            size = int(buf[at + 1:end])
            if len(buf) < end + 2 + size + 2:
                return None, buf
            args.append(buf[end + 2:end + 2 + size])
            at = end + 2 + size + 2
        return args, buf[at:]

    @staticmethod
    def _closed_within(c, seconds):
        """Waits up to seconds for the peer to close (True), dropping what it sends."""
        end = time.monotonic() + seconds
        while True:
            left = end - time.monotonic()
            if left <= 0 or not select.select([c], [], [], left)[0]:
                return False
            try:
                if not c.recv(65536):
                    return True
            except OSError:
                return True

    def _attack(self, c, attack):
        """The attack's reply on c; True once the client hung up."""
        if attack == "huge":
            c.sendall(b"*2000000000\r\n")
            return self._closed_within(c, 60)
        for i in range(len(DRIP_REPLY)):
            c.sendall(DRIP_REPLY[i:i + 1])
            if self._closed_within(c, DRIP_EVERY_S):
                return True
        return False

    def _serve(self, c):
        buf = b""
        while True:
            args, buf = self._command(buf)
            if args is None:
                try:
                    data = c.recv(65536)
                except OSError:
                    data = b""
                if not data:
                    c.close()
                    return
                buf += data
                continue
            name = args[0].upper()
            with self.lock:
                self.asked += name == b"SMEMBERS"
                attack = self.attack if name == b"SMEMBERS" else None
                if attack:
                    if not self.always:
                        self.attack = None
                    self.held.append(None)
                    k = len(self.held) - 1
            t0 = time.monotonic()
            try:
                if not attack:
                    c.sendall({b"GET": b"$-1\r\n", b"SMEMBERS": b"*0\r\n", b"SADD": b":1\r\n",
                               b"EXPIRE": b":1\r\n"}.get(name, b"+OK\r\n"))
                    continue
                closed = self._attack(c, attack)
            except OSError:
                closed = True
            if closed:
                self.held[k] = time.monotonic() - t0
                c.close()
                return

    def close(self):
        self.sock.close()
