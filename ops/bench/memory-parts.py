#!/usr/bin/env python3
"""What a running findmy's resident memory is made of, from /proc/PID/smaps, as one JSON line.

    ops/bench/memory-parts.py PID [--maps]

Prints VmRSS, VmHWM and the thread count from /proc/PID/status, and each mapping's Rss summed per
part (kB):
  - findmy binary, Swift runtime libraries, Foundation and ICU, other shared libraries: pages of
    those files mapped into the process (code the process ran, and relocated data). Clean code
    pages are shared with every other process using the same file; Private_Dirty says what is
    the process's own (reported beside Rss as private_kb).
  - malloc main arena ([heap]), malloc thread arenas: glibc malloc's memory (live objects, plus
    free chunks not returned to the kernel). A thread arena is a 64 MiB-aligned reservation.
  - thread stacks: the touched pages of each thread's stack (the stack holding a blocked
    thread's stack pointer, from /proc/PID/task/TID/syscall, or a mapping just above a guard page).
  - other anonymous: malloc's large blocks (mmap'ed above M_MMAP_THRESHOLD, 128 KiB at first)
    and other mmaps (libsodium's Argon2 memory while a password is checked, for one).
With --maps, also every anonymous mapping over 256 kB and the threads by name, on stderr.
"""
import collections
import json
import os
import sys

ARENA_BYTES = 64 << 20


def read_maps(pid):
    maps = []
    current = None
    with open(f"/proc/{pid}/smaps") as smaps:
        for line in smaps:
            fields = line.split()
            if "-" in fields[0] and not fields[0].endswith(":"):
                low, high = (int(x, 16) for x in fields[0].split("-"))
                current = {"low": low, "high": high, "perm": fields[1],
                           "name": fields[5] if len(fields) > 5 else "", "rss": 0, "private": 0}
                maps.append(current)
            elif fields[0] == "Rss:":
                current["rss"] = int(fields[1])
            elif fields[0] == "Private_Dirty:":
                current["private"] = int(fields[1])
    return maps


def stack_pointers(pid):
    """Stack pointers of threads blocked in a system call, with each thread's name."""
    pointers = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/syscall") as syscall:
                fields = syscall.read().split()
        except OSError:
            continue
        if len(fields) >= 8:
            pointers[int(fields[-2], 16)] = tid
    return pointers


def part(index, mapping, maps, stacks):
    name = mapping["name"]
    if name == "[heap]":
        return "malloc main arena ([heap])"
    if name == "[stack]" or index in stacks:
        return "thread stacks"
    if name.startswith("["):
        return "kernel ([vdso], [vvar])"
    if name:
        base = os.path.basename(name)
        if base == "findmy" or base.startswith("findmy"):
            return "findmy binary"
        if "Foundation" in base or "icu" in base.lower():
            return "Foundation and ICU"
        if base.startswith(("libswift", "libdispatch", "libBlocksRuntime")):
            return "Swift runtime libraries"
        return "other shared libraries"
    if mapping["low"] % ARENA_BYTES == 0 and mapping["perm"].startswith("rw"):
        return "malloc thread arenas"
    below = maps[index - 1] if index > 0 else None
    if (below and below["perm"] == "---p" and below["high"] == mapping["low"]
            and below["high"] - below["low"] <= 64 << 10):
        return "thread stacks"
    return "other anonymous"


def main():
    pid = sys.argv[1]
    maps = read_maps(pid)
    pointers = stack_pointers(pid)
    stacks = {i for i, m in enumerate(maps) for sp in pointers if m["low"] <= sp < m["high"]}
    rss = collections.Counter()
    private = collections.Counter()
    for index, mapping in enumerate(maps):
        name = part(index, mapping, maps, stacks)
        rss[name] += mapping["rss"]
        private[name] += mapping["private"]
    with open(f"/proc/{pid}/status") as status_file:
        status = dict(line.split(":", 1) for line in status_file if ":" in line)
    print(json.dumps({
        "vm_rss_kb": int(status["VmRSS"].split()[0]), "vm_hwm_kb": int(status["VmHWM"].split()[0]),
        "threads": int(status["Threads"]),
        "parts_kb": {name: {"rss": value, "private": private[name]} for name, value in rss.most_common()},
    }))
    if "--maps" in sys.argv:
        for index, mapping in enumerate(maps):
            if mapping["rss"] >= 256 and not mapping["name"]:
                print(f"{mapping['low']:x} {(mapping['high'] - mapping['low']) >> 10:8d} kB, rss {mapping['rss']:6d} kB "
                      f"{mapping['perm']} {part(index, mapping, maps, stacks)}", file=sys.stderr)
        names = collections.Counter()
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/comm") as comm:
                names[comm.read().strip()] += 1
        print(dict(names), file=sys.stderr)


if __name__ == "__main__":
    main()
