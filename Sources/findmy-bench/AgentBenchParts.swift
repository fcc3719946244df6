// What `findmy-bench agent` observes the agent through: a gpsd of its own on loopback (gpsd's JSON
// protocol, each report's time and the moment it was written kept), the agent's log read line by
// line as it is written, and a FIFO the sound command writes a byte to.
import CLI
import JSON
import Threads

#if canImport(Glibc)
    import Glibc
#endif

/// The `findmy-agent` the driver starts: `FINDMY_AGENT_BIN`, else the one beside this executable.
func agentExecutable() throws -> String {
    if let raw = getenv("FINDMY_AGENT_BIN"), raw.pointee != 0 { return String(cString: raw) }
    let path = executableDirectory() + "/findmy-agent"
    guard access(path, X_OK) == 0 else {
        throw UsageError(
            "cannot find findmy-agent at \(path); build it beside findmy-bench "
                + "(`swift build -c release --product findmy-agent`) or set FINDMY_AGENT_BIN")
    }
    return path
}

/// p50, p90, p99 and max of `micros` in ms, as JSON members; the percentile is the value at rank
/// count × fraction of the sorted values (as `findmy-bench stream` takes it).
func latencyJSON(_ micros: [Int64]) -> String {
    guard !micros.isEmpty else { return "\"count\": 0" }
    let sorted = micros.sorted()
    func millis(_ fraction: Double) -> String {
        let value = sorted[min(sorted.count - 1, Int(Double(sorted.count) * fraction))]
        return String(Double(value / 10) / 100)
    }
    return "\"count\": \(sorted.count), \"p50_ms\": \(millis(0.5)), \"p90_ms\": \(millis(0.9)), "
        + "\"p99_ms\": \(millis(0.99)), \"max_ms\": \(millis(1))"
}

/// A listening TCP socket on 127.0.0.1, its port chosen by the kernel.
private func listenOnLoopback() throws -> (fd: Int32, port: UInt16) {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
    guard fd >= 0 else { throw UsageError("socket failed") }
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    let bound = withUnsafeMutablePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
            bind(fd, $0, length) == 0 && listen(fd, 4) == 0 && getsockname(fd, $0, &length) == 0
        }
    }
    guard bound else {
        close(fd)
        throw UsageError("cannot listen on 127.0.0.1: \(String(cString: strerror(errno)))")
    }
    return (fd, UInt16(bigEndian: address.sin_port))
}

/// gpsd as the agent sees it on its port: VERSION on connect, DEVICES and WATCH once the client
/// sent `?WATCH=...;`, then a TPV report (3-D fix, gpsd 3.22's fields) every `intervalMicros`,
/// each with a receiver time of its own (the wall clock in whole ms, always increasing: the agent
/// drops a report with the time of the one before). For each report it keeps when it was written
/// (CLOCK_MONOTONIC, right after `send`), so that the fix that answers a locate names the moment
/// its report left. One client at a time; one that goes is waited for again.
final class FakeGPSD: @unchecked Sendable {
    let port: UInt16
    let intervalMicros: Int64
    private let listener: Int32
    private let lock = ConditionLock()
    // Under `lock`: the reports written (receiver time, monotonic time written), oldest first.
    private var written: [(receiverMicros: Int64, monotonicMicros: Int64)] = []
    private var stopped = false
    private var paused = false
    private var burstPending = 0
    private var client: Int32 = -1
    private var thread: pthread_t?

    init(intervalMicros: Int64) throws {
        (listener, port) = try listenOnLoopback()
        self.intervalMicros = intervalMicros
    }

    func start() { thread = spawnThread { [self] in serve() } }

    func stop() {
        lock.withLock {
            stopped = true
            if client >= 0 { shutdown(client, Int32(SHUT_RDWR)) }
            lock.broadcast()
        }
        shutdown(listener, Int32(SHUT_RDWR))
        if let thread { pthread_join(thread, nil) }
        close(listener)
    }

    /// Writes `count` reports at once, their receiver times one a minute up to a minute ago (what a
    /// receiver took during a week offline, at one a minute), then no more until `resume`.
    func burst(_ count: Int) {
        lock.withLock {
            burstPending += count
            paused = true
            lock.broadcast()
        }
    }

    func resume() {
        lock.withLock {
            paused = false
            lock.broadcast()
        }
    }

    /// How many reports were written so far.
    var reportCount: Int { lock.withLock { written.count } }

    /// When the report whose receiver time is `receiverMicros` was written (within 500 µs: the
    /// agent carries the time as a floating-point number of seconds); nil for none by `deadline`.
    /// Waits: a report is noted after its `send` returns, and on a loaded machine the agent, the
    /// server and the driver's poll can all run before the writing thread notes it.
    func writtenAt(receiverMicros: Int64, waitingUntil deadline: Int64) -> Int64? {
        lock.withLock {
            while true {
                if let entry = written.last(where: { abs($0.receiverMicros - receiverMicros) <= 500 }) {
                    return entry.monotonicMicros
                }
                guard !stopped, monotonicMicros() < deadline else { return nil }
                _ = lock.wait(0, untilMonotonicMicros: deadline)
            }
        }
    }

    private func serve() {
        while !lock.withLock({ stopped }) {
            let fd = accept(listener, nil, nil)
            guard fd >= 0 else { continue }
            // Not for the children the driver starts (the agent, its players).
            _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
            let registered = lock.withLock {
                guard !stopped else { return false }
                client = fd
                return true
            }
            if registered { session(fd) }
            lock.withLock { client = -1 }
            close(fd)
        }
    }

    private func session(_ fd: Int32) {
        var noDelay: Int32 = 1
        setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &noDelay, socklen_t(MemoryLayout<Int32>.size))
        let version = #"{"class":"VERSION","release":"3.22","rev":"3.22","proto_major":3,"proto_minor":14}"#
        guard write(fd, version), waitForWatch(fd) else { return }
        let devices =
            #"{"class":"DEVICES","devices":[{"class":"DEVICE","path":"/dev/ttyACM0","driver":"NMEA0183","#
            + #""activated":"2026-12-06T12:00:00.000Z","flags":1,"native":0,"bps":9600,"parity":"N","#
            + #""stopbits":1,"cycle":1.00}]}"#
        let watch =
            #"{"class":"WATCH","enable":true,"json":true,"nmea":false,"raw":0,"scaled":false,"#
            + #""timing":false,"split24":false,"pps":false}"#
        guard write(fd, devices), write(fd, watch) else { return }
        var next = monotonicMicros()
        var lastReceiverMicros: Int64 = 0
        var index = 0
        while true {
            let (goOn, burst) = lock.withLock { () -> (Bool, Int) in
                while !stopped && burstPending == 0 && (paused || monotonicMicros() < next) {
                    if paused { lock.wait() } else { _ = lock.wait(0, untilMonotonicMicros: next) }
                }
                defer { burstPending = 0 }
                return (!stopped, burstPending)
            }
            guard goOn else { return }
            if burst > 0 {
                let firstMicros = wallClockMillis() * 1_000 - Int64(burst) * 60_000_000
                let lines = (0..<burst).map {
                    Self.tpv(receiverMicros: firstMicros + Int64($0) * 60_000_000, index: index + $0)
                }
                index += burst
                guard write(fd, lines.joined(separator: "\r\n")) else { return }
                continue
            }
            next = max(next + intervalMicros, monotonicMicros() - intervalMicros)
            let receiverMicros = max(lastReceiverMicros + 1_000, wallClockMillis() * 1_000)
            lastReceiverMicros = receiverMicros
            index += 1
            guard write(fd, Self.tpv(receiverMicros: receiverMicros, index: index)) else { return }
            let sent = monotonicMicros()
            lock.withLock {
                written.append((receiverMicros, sent))
                if written.count > 100_000 { written.removeFirst(50_000) }
                lock.broadcast()
            }
        }
    }

    /// A TPV report as gpsd 3.22 writes one for a receiver walking north-east.
    static func tpv(receiverMicros: Int64, index: Int) -> String {
        let latitude = 52.52 + Double(index % 10_000) * 0.000_01
        let longitude = 13.405 + Double(index % 10_000) * 0.000_01
        return #"{"class":"TPV","device":"/dev/ttyACM0","mode":3,"time":""#
            + RFC3339.formatMillis(receiverMicros)
            + #"","ept":0.005,"lat":\#(latitude),"lon":\#(longitude),"altHAE":73.5000,"altMSL":34.1000,"#
            + #""alt":34.1000,"track":45.0000,"magtrack":49.0590,"magvar":4.1,"speed":1.399,"climb":0.100,"#
            + #""geoidSep":39.400,"eph":17.100}"#
    }

    /// Reads until the client's `?WATCH=` command; false when the connection ended first.
    private func waitForWatch(_ fd: Int32) -> Bool {
        var received: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 1024)
        while !String(decoding: received, as: UTF8.self).contains("?WATCH=") {
            let count = recv(fd, &buffer, buffer.count, 0)
            if count < 0 && errno == EINTR { continue }
            guard count > 0 else { return false }
            received += buffer[..<count]
        }
        return true
    }

    private func write(_ fd: Int32, _ line: String) -> Bool {
        let bytes = Array((line + "\r\n").utf8)
        return bytes.withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            == bytes.count
    }

    private func wallClockMillis() -> Int64 {
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        return Int64(now.tv_sec) * 1_000 + Int64(now.tv_nsec) / 1_000_000
    }
}

/// A FIFO made at `path` and held open for reading and writing (so that a writer's open never
/// blocks and the last writer's close is no end), read on a thread of its own: each line kept with
/// the monotonic time it was read, and copied to `copyPath`.
final class LineWatcher: @unchecked Sendable {
    let path: String
    private let fd: Int32
    private let copy: Int32
    private let lock = ConditionLock()
    // Under `lock`.
    private var lines: [(text: String, micros: Int64)] = []
    private var stopped = false
    private var thread: pthread_t?

    init(fifo path: String, copyPath: String) throws {
        self.path = path
        unlink(path)
        guard mkfifo(path, 0o600) == 0 else { throw UsageError("cannot make the FIFO \(path)") }
        fd = open(path, O_RDWR | O_CLOEXEC)
        copy = open(copyPath, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        guard fd >= 0, copy >= 0 else { throw UsageError("cannot open \(path) or \(copyPath)") }
        thread = spawnThread { [self] in readLines() }
    }

    func stop() {
        lock.withLock { stopped = true }
        if let thread { pthread_join(thread, nil) }
        close(fd)
        close(copy)
        unlink(path)
    }

    /// The number of lines read so far: where a later `wait` starts looking.
    var count: Int { lock.withLock { lines.count } }

    /// Line `index`'s text.
    func line(_ index: Int) -> String { lock.withLock { lines[index].text } }

    /// The first line from index `from` on that `matches`, with when it was read; nil when none
    /// came before the monotonic `deadline`.
    func wait(from: Int, deadline: Int64, _ matches: (String) -> Bool) -> (index: Int, micros: Int64)? {
        lock.withLock {
            var index = from
            while true {
                while index < lines.count {
                    if matches(lines[index].text) { return (index, lines[index].micros) }
                    index += 1
                }
                if monotonicMicros() >= deadline { return nil }
                _ = lock.wait(0, untilMonotonicMicros: deadline)
            }
        }
    }

    private func readLines() {
        var pending: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 16 << 10)
        while !lock.withLock({ stopped }) {
            var poller = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            guard poll(&poller, 1, 100) > 0 else { continue }
            let count = read(fd, &buffer, buffer.count)
            guard count > 0 else { continue }
            let micros = monotonicMicros()
            _ = buffer.withUnsafeBytes { Glibc.write(copy, $0.baseAddress, count) }
            pending += buffer[..<count]
            var complete: [String] = []
            while let newline = pending.firstIndex(of: 0x0A) {
                complete.append(String(decoding: pending[..<newline], as: UTF8.self))
                pending.removeFirst(newline + 1)
            }
            guard !complete.isEmpty else { continue }
            lock.withLock {
                lines += complete.map { ($0, micros) }
                lock.broadcast()
            }
        }
    }
}

/// The FIFO the sound command writes a byte to (`/bin/sh -c 'echo > "$0"; exec sleep 3600' FIFO`):
/// held open for reading and writing, read on the calling thread.
final class MarkFIFO {
    let path: String
    private let fd: Int32

    /// The alarm as the agent runs it: a shell that writes the mark, then waits to be killed (so
    /// that the agent's alarm loop plays it once, until it is stopped).
    var soundCommand: [String] { ["/bin/sh", "-c", #"echo > "$0"; exec sleep 3600"#, path] }

    init(path: String) throws {
        self.path = path
        unlink(path)
        guard mkfifo(path, 0o600) == 0 else { throw UsageError("cannot make the FIFO \(path)") }
        fd = open(path, O_RDWR | O_CLOEXEC | O_NONBLOCK)
        guard fd >= 0 else { throw UsageError("cannot open \(path)") }
    }

    deinit {
        close(fd)
        unlink(path)
    }

    /// True when a mark is there, unread.
    var hasMark: Bool {
        var poller = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        return poll(&poller, 1, 0) > 0
    }

    /// Waits for one mark; the monotonic time it was read, or nil at the monotonic `deadline`.
    func wait(deadline: Int64) -> Int64? {
        var byte: UInt8 = 0
        while true {
            if read(fd, &byte, 1) == 1 { return monotonicMicros() }
            let left = (deadline - monotonicMicros()) / 1_000
            guard left > 0 else { return nil }
            var poller = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            _ = poll(&poller, 1, Int32(min(left, 1_000)))
        }
    }

    /// The mark's own cost: the same program started the way the agent starts a player (Threads'
    /// spawner, under `setpriv --pdeathsig KILL`, a process group of its own), from the spawn to
    /// its mark read; then its group killed.
    func execMicros(deadline: Int64) throws -> Int64 {
        let started = monotonicMicros()
        let pid = try spawnChild(
            [setprivPath, "--pdeathsig", "KILL", "--"] + soundCommand, outputPath: "/dev/null")
        defer {
            kill(-pid, SIGKILL)
            var status: Int32 = 0
            waitpid(pid, &status, 0)
        }
        guard let marked = wait(deadline: deadline) else {
            throw UsageError("the mark program wrote no mark within the time limit")
        }
        return marked - started
    }
}
