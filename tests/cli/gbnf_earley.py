"""gbnf_earley.py: a GBNF recognizer written apart from recur's grammar engine (src/grammar),
to check the engine's outputs independently: its own parser of the GBNF text into plain BNF
(repetitions become helper rules) and an Earley recognizer over code points, which answers
both "is this text in the language" and "can this text still be completed" (a viable prefix:
the last Earley set is not empty).

    g = Grammar(text)           # raises GbnfError on bad input
    g.accepts(s)                # True when s is a complete parse of the root rule
    g.viable_prefix(s)          # True when some completion of s is in the language
"""


class GbnfError(Exception):
    pass


ESCAPES = {"t": "\t", "r": "\r", "n": "\n", "\\": "\\", '"': '"', "[": "[", "]": "]",
           "-": "-", "^": "^"}


class _Parser:
    def __init__(self, text):
        self.s = text
        self.i = 0
        self.rules = {}       # name -> list of alternatives (lists of symbols)
        self.counter = 0

    def fresh(self, base):
        self.counter += 1
        return "%s~%d" % (base, self.counter)

    def peek(self):
        return self.s[self.i] if self.i < len(self.s) else ""

    def space(self, newlines):
        while self.i < len(self.s):
            c = self.s[self.i]
            if c in " \t" or (newlines and c in "\r\n"):
                self.i += 1
            elif c == "#":
                while self.i < len(self.s) and self.s[self.i] not in "\r\n":
                    self.i += 1
            else:
                break

    def name(self):
        j = self.i
        while self.i < len(self.s) and (self.s[self.i].isascii() and
                                        (self.s[self.i].isalnum() or self.s[self.i] in "-_")):
            self.i += 1
        if j == self.i:
            raise GbnfError("expected a name at %d" % j)
        return self.s[j:self.i]

    def char(self):
        c = self.s[self.i]
        self.i += 1
        if c != "\\":
            return ord(c)
        e = self.s[self.i]
        self.i += 1
        if e in "xuU":
            n = {"x": 2, "u": 4, "U": 8}[e]
            v = int(self.s[self.i:self.i + n], 16)
            self.i += n
            return v
        if e in ESCAPES:
            return ord(ESCAPES[e])
        raise GbnfError("bad escape \\%s" % e)

    def grammar(self):
        self.space(True)
        while self.i < len(self.s):
            n = self.name()
            self.space(False)
            if not self.s.startswith("::=", self.i):
                raise GbnfError("expected ::=")
            self.i += 3
            self.space(True)
            self.rules[n] = self.alternatives(n, False)
            self.space(True)
        return self.rules

    def alternatives(self, rule, nested):
        alts = [self.sequence(rule, nested)]
        while self.peek() == "|":
            self.i += 1
            self.space(True)
            alts.append(self.sequence(rule, nested))
        return alts

    def sequence(self, rule, nested):
        seq = []
        last = None  # start index of the last symbol in seq
        while self.i < len(self.s):
            c = self.s[self.i]
            if c == '"':
                self.i += 1
                last = len(seq)
                while self.s[self.i] != '"':
                    v = self.char()
                    seq.append(("t", False, ((v, v),)))
                self.i += 1
            elif c == "[":
                self.i += 1
                neg = self.peek() == "^"
                if neg:
                    self.i += 1
                ranges = []
                while self.s[self.i] != "]":
                    lo = self.char()
                    hi = lo
                    if self.s[self.i] == "-" and self.s[self.i + 1] != "]":
                        self.i += 1
                        hi = self.char()
                    ranges.append((lo, hi))
                self.i += 1
                last = len(seq)
                seq.append(("t", neg, tuple(ranges)))
            elif c == ".":
                self.i += 1
                last = len(seq)
                seq.append(("t", True, ()))
            elif c == "(":
                self.i += 1
                self.space(True)
                sub = self.fresh(rule)
                self.rules[sub] = self.alternatives(rule, True)
                if self.peek() != ")":
                    raise GbnfError("expected )")
                self.i += 1
                last = len(seq)
                seq.append(("n", sub))
            elif c.isascii() and (c.isalnum() or c in "-_"):
                last = len(seq)
                seq.append(("n", self.name()))
            elif c in "*+?{":
                if last is None:
                    raise GbnfError("nothing to repeat")
                self.i += 1
                lo, hi = {"*": (0, None), "+": (1, None), "?": (0, 1)}.get(c, (None, None))
                if c == "{":
                    j = self.s.index("}", self.i)
                    body = self.s[self.i:j].replace(" ", "")
                    self.i = j + 1
                    if "," in body:
                        a, b = body.split(",")
                        lo, hi = int(a), (int(b) if b else None)
                    else:
                        lo = hi = int(body)
                item = seq[last:]
                del seq[last:]
                seq.extend(self.repeat(rule, item, lo, hi))
                last = None
            else:
                break
            self.space(nested)
        return seq

    def repeat(self, rule, item, lo, hi):
        out = list(item) * lo
        if hi is None:
            star = self.fresh(rule)
            self.rules[star] = [list(item) + [("n", star)], []]
            out.append(("n", star))
        else:
            # (item (item ( ... )?)?)? nested hi - lo deep
            tail = None
            for _ in range(hi - lo):
                r = self.fresh(rule)
                self.rules[r] = [list(item) + ([("n", tail)] if tail else []), []]
                tail = r
            if tail:
                out.append(("n", tail))
        return out


class Grammar:
    def __init__(self, text, root="root"):
        rules = _Parser(text).grammar()
        if root not in rules:
            raise GbnfError("no root rule")
        for alts in rules.values():
            for seq in alts:
                for sym in seq:
                    if sym[0] == "n" and sym[1] not in rules:
                        raise GbnfError("undefined rule " + sym[1])
        self.prods = []          # (lhs, rhs tuple)
        self.by_lhs = {}
        for lhs, alts in rules.items():
            for seq in alts:
                self.by_lhs.setdefault(lhs, []).append(len(self.prods))
                self.prods.append((lhs, tuple(seq)))
        self.start = len(self.prods)
        self.prods.append(("<start>", (("n", root),)))
        nullable = set()
        changed = True
        while changed:
            changed = False
            for lhs, rhs in self.prods:
                if lhs not in nullable and all(s[0] == "n" and s[1] in nullable for s in rhs):
                    nullable.add(lhs)
                    changed = True
        self.nullable = nullable

    @staticmethod
    def _match(sym, cp):
        inside = any(lo <= cp <= hi for lo, hi in sym[2])
        return inside != sym[1]

    def _chart(self, text):
        """The Earley sets for text; returns (last set, number of sets filled)."""
        cps = [ord(c) for c in text]
        n = len(cps)
        current = {(self.start, 0, 0)}
        waiting = [dict() for _ in range(n + 1)]   # pos -> nonterminal -> items waiting
        for i in range(n + 1):
            agenda = list(current)
            seen = set(current)
            nxt = set()
            while agenda:
                p, dot, org = agenda.pop()
                lhs, rhs = self.prods[p]
                if dot < len(rhs):
                    sym = rhs[dot]
                    if sym[0] == "n":
                        waiting[i].setdefault(sym[1], []).append((p, dot, org))
                        for q in self.by_lhs[sym[1]]:
                            it = (q, 0, i)
                            if it not in seen:
                                seen.add(it)
                                agenda.append(it)
                        if sym[1] in self.nullable:
                            it = (p, dot + 1, org)
                            if it not in seen:
                                seen.add(it)
                                agenda.append(it)
                    elif i < n and self._match(sym, cps[i]):
                        nxt.add((p, dot + 1, org))
                else:
                    for (p2, d2, o2) in waiting[org].get(lhs, ()):
                        it = (p2, d2 + 1, o2)
                        if it not in seen:
                            seen.add(it)
                            agenda.append(it)
            if i == n:
                return seen
            if not nxt:
                return None
            current = nxt
        return None

    def viable_prefix(self, text):
        return self._chart(text) is not None

    def accepts(self, text):
        last = self._chart(text)
        return last is not None and (self.start, 1, 0) in last
