#!/usr/bin/env python3
"""Run a command and say how much CPU PostgreSQL, nats-server, the command
itself and everything else used between each two lines it printed.

    python3 scripts/cpusplit.py go run ./cmd/outbox bench --db … --broker …

`outbox bench` prints one line as each phase ends, so the interval before
"relay drain of …" is the drain. Figures are cores (1.00 = one core busy).
Reads /proc only (Linux); written for BENCHMARKS.md, not for CI.
"""
import os
import subprocess
import sys
import threading
import time

HZ = os.sysconf("SC_CLK_TCK")


def group(comm):
    if comm.startswith("postgres"):
        return "postgres"
    if "nats-server" in comm:
        return "nats"
    if comm.startswith(("outbox", "bench", "go")):
        return "command"
    return "other"


def snapshot():
    ticks = {"postgres": 0, "nats": 0, "command": 0, "other": 0}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                st = f.read()
        except OSError:
            continue
        comm = st[st.index("(") + 1 : st.rindex(")")]
        fields = st[st.rindex(")") + 2 :].split()
        # utime + stime, and cutime + cstime: the CPU of children already
        # reaped (PostgreSQL backends that ended, the relay processes
        # `outbox bench --relays` started and stopped), which would
        # otherwise vanish from the sums with their /proc entries
        ticks[group(comm)] += sum(int(x) for x in fields[11:15])
    return ticks


def main():
    if len(sys.argv) < 2:
        sys.exit("usage: cpusplit.py COMMAND [ARGS…]")
    proc = subprocess.Popen(sys.argv[1:], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    marks = []  # (time, ticks, line)
    marks.append((time.time(), snapshot(), "(start)"))

    def read():
        for line in proc.stdout:
            marks.append((time.time(), snapshot(), line.rstrip()))

    t = threading.Thread(target=read)
    t.start()
    proc.wait()
    t.join()
    for (t0, s0, _), (t1, s1, line) in zip(marks, marks[1:]):
        dt = max(t1 - t0, 1e-6)
        cores = " ".join(f"{k} {(s1[k] - s0[k]) / HZ / dt:4.2f}" for k in s0)
        print(f"{line}\n    [{dt:5.2f} s: {cores}]")
    sys.exit(proc.returncode)


if __name__ == "__main__":
    main()
