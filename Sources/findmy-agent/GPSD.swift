// Fixes from gpsd (gpsd.gitlab.io), the daemon that owns the GPS receiver on Linux: its JSON
// protocol over TCP (port 2947), read on a thread of its own with POSIX sockets.
import FindMyClient
import Threads

#if canImport(Glibc)
    import Glibc
#endif

/// A `FixSource` watching gpsd: `?WATCH={"enable":true,"json":true};`, then every TPV report
/// with a fix (GPSDReport's rules) handed on as it comes. When gpsd is not there or goes away (a
/// restart, the receiver unplugged and gpsd with it), the source connects again after a back-off
/// (`reconnectDelayMicrosMin` doubling up to `reconnectDelayMicrosMax`, back to the minimum once a
/// connection delivered a fix), logging each loss once, and never gives up until `stop`.
///
/// gpsd reports each epoch once its receiver's cycle ends; some receivers end a cycle twice (the
/// first report of a track, before the receiver's GGA came, had no altitude): a report with the
/// same time as the last one handed on is the same epoch and is not handed on again.
final class GPSDFixSource: FixSource, @unchecked Sendable {
    static let reconnectDelayMicrosMin: Int64 = 500_000
    static let reconnectDelayMicrosMax: Int64 = 30_000_000
    static let readBytesMax = 16 << 10

    let host: String
    let port: Int
    private let log: @Sendable (String) -> Void
    private let lock = ConditionLock()
    // Under `lock`: the reading thread, the socket it reads (shut down by `stop` to end its read),
    // the time of the last fix handed on, and the `freshFix` calls waiting for the next one.
    private var worker: StoppableThread?
    private var socket: Int32 = -1
    private var lastFixTime: Int64?
    private var waiters: [UInt64: Waiter] = [:]
    private var activeWaiters: Set<UInt64> = []
    private var nextWaiter: UInt64 = 0

    private enum Waiter {
        case waiting(CheckedContinuation<ClientFix?, Never>)
        /// Its time ran out before its continuation was registered.
        case timedOut
    }

    init(host: String = "127.0.0.1", port: Int = 2947, log: @escaping @Sendable (String) -> Void = { _ in }) {
        self.host = host
        self.port = port
        self.log = log
    }

    var address: String { "\(host):\(port)" }

    func start(onFix: @escaping @Sendable (ClientFix) -> Void) throws {
        let thread = StoppableThread()
        lock.withLock {
            precondition(worker == nil, "a GPSDFixSource starts once until stopped")
            worker = thread
        }
        thread.start { [self] stop in run(stop: stop, onFix: onFix) }
    }

    func stop() {
        let thread = lock.withLock {
            defer { worker = nil }
            return worker
        }
        guard let thread else { return }
        thread.stopSignal.request()
        lock.withLock {
            if socket >= 0 { shutdown(socket, Int32(SHUT_RDWR)) }
        }
        thread.stop()
        for waiter in takeWaiting() { waiter.resume(returning: nil) }
    }

    func freshFix(timeoutSeconds: Double) async -> ClientFix? {
        let id = lock.withLock {
            nextWaiter += 1
            activeWaiters.insert(nextWaiter)
            return nextWaiter
        }
        let timeout = Task {
            try? await Task.sleep(nanoseconds: UInt64(max(0, timeoutSeconds) * 1_000_000_000))
            if !Task.isCancelled { timeOut(waiter: id) }
        }
        defer {
            timeout.cancel()
            lock.withLock {
                activeWaiters.remove(id)
                waiters[id] = nil
            }
        }
        return await withCheckedContinuation { continuation in
            let timedOut = lock.withLock {
                if case .timedOut? = waiters[id] { return true }
                waiters[id] = .waiting(continuation)
                return false
            }
            if timedOut { continuation.resume(returning: nil) }
        }
    }

    /// Ends `freshFix` call `id` without a fix; when its continuation is not there yet, leaves the
    /// mark it finds as it arrives.
    private func timeOut(waiter id: UInt64) {
        let continuation = lock.withLock { () -> CheckedContinuation<ClientFix?, Never>? in
            guard activeWaiters.contains(id) else { return nil }
            if case .waiting(let continuation)? = waiters[id] {
                waiters[id] = nil
                return continuation
            }
            waiters[id] = .timedOut
            return nil
        }
        continuation?.resume(returning: nil)
    }

    /// Removes and returns every `freshFix` call waiting now.
    private func takeWaiting() -> [CheckedContinuation<ClientFix?, Never>] {
        lock.withLock {
            var taken: [CheckedContinuation<ClientFix?, Never>] = []
            for (id, waiter) in waiters {
                if case .waiting(let continuation) = waiter {
                    taken.append(continuation)
                    waiters[id] = nil
                }
            }
            return taken
        }
    }

    /// The reading thread: connect, watch, read until the connection ends, wait, again.
    private func run(stop: StopSignal, onFix: @escaping @Sendable (ClientFix) -> Void) {
        var delay = Self.reconnectDelayMicrosMin
        var lostLogged = false
        while !stop.isRequested {
            var deliveredFix = false
            let outcome = session(stop: stop) { fix in
                deliveredFix = true
                deliver(fix, onFix: onFix)
            }
            if stop.isRequested { break }
            if deliveredFix {
                delay = Self.reconnectDelayMicrosMin
                lostLogged = false
            }
            if !lostLogged {
                log("gpsd at \(address): connection lost (\(outcome)); connecting again in the background")
                lostLogged = true
            }
            stop.wait(micros: delay)
            delay = min(Self.reconnectDelayMicrosMax, delay * 2)
        }
    }

    private func deliver(_ fix: ClientFix, onFix: @Sendable (ClientFix) -> Void) {
        let isNewEpoch = lock.withLock {
            guard lastFixTime != fix.recordedAtMicros else { return false }
            lastFixTime = fix.recordedAtMicros
            return true
        }
        guard isNewEpoch else { return }
        onFix(fix)
        for waiter in takeWaiting() { waiter.resume(returning: fix) }
    }

    /// One connection to gpsd, read until it ends; returns why it ended.
    private func session(stop: StopSignal, onFix: (ClientFix) -> Void) -> String {
        let connected: Int32
        switch connect() {
        case .connected(let descriptor): connected = descriptor
        case .failed(let reason): return reason
        }
        let registered = lock.withLock {
            guard !stop.isRequested else { return false }
            socket = connected
            return true
        }
        defer {
            lock.withLock { socket = -1 }
            close(connected)
        }
        guard registered else { return "stopped" }
        var watch = Array(#"?WATCH={"enable":true,"json":true};"#.utf8) + [UInt8(ascii: "\n")]
        guard send(connected, &watch, watch.count, Int32(MSG_NOSIGNAL)) == watch.count else {
            return "cannot send WATCH: \(String(cString: strerror(errno)))"
        }
        log("gpsd at \(address): watching")
        var reader = GPSDLineReader()
        var chunk = [UInt8](repeating: 0, count: Self.readBytesMax)
        while true {
            let count = recv(connected, &chunk, chunk.count, 0)
            if count < 0 && errno == EINTR { continue }
            if count < 0 { return "read failed: \(String(cString: strerror(errno)))" }
            if count == 0 { return "gpsd closed the connection" }
            reader.append(chunk[..<count])
            while let line = reader.nextLine() {
                if let fix = GPSDReport.fix(line: line) { onFix(fix) }
            }
        }
    }

    private enum Connection {
        case connected(Int32)
        case failed(String)
    }

    /// A TCP connection to gpsd (`host` a name or an address, IPv4 or IPv6).
    private func connect() -> Connection {
        var hints = addrinfo()
        hints.ai_family = AF_UNSPEC
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        var list: UnsafeMutablePointer<addrinfo>?
        let looked = getaddrinfo(host, String(port), &hints, &list)
        guard looked == 0, let first = list else {
            return .failed("cannot resolve \(host): \(String(cString: gai_strerror(looked)))")
        }
        defer { freeaddrinfo(list) }
        var reason = "no address"
        var candidate: UnsafeMutablePointer<addrinfo>? = first
        while let info = candidate {
            candidate = info.pointee.ai_next
            let descriptor = Glibc.socket(
                info.pointee.ai_family, info.pointee.ai_socktype | Int32(SOCK_CLOEXEC.rawValue),
                info.pointee.ai_protocol)
            guard descriptor >= 0 else { continue }
            if Glibc.connect(descriptor, info.pointee.ai_addr, info.pointee.ai_addrlen) == 0 {
                var on: Int32 = 1
                _ = setsockopt(descriptor, SOL_SOCKET, SO_KEEPALIVE, &on, socklen_t(MemoryLayout<Int32>.size))
                return .connected(descriptor)
            }
            reason = String(cString: strerror(errno))
            close(descriptor)
        }
        return .failed("cannot connect: \(reason)")
    }
}
