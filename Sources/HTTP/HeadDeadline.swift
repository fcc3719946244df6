import Threads

#if canImport(Glibc)
    import Glibc
#endif

/// Closes a connection whose request head has not fully arrived within `requestHeadSecondsMax` of
/// the connection opening or of its previous answer.
///
/// Why a thread of its own: libmicrohttpd 0.9.75 calls nothing while a head arrives (the access
/// handler runs once the head is complete), and its only timeout is an idle one, which a client
/// sending a byte every few seconds never trips. So this thread looks once a second and calls
/// shutdown(2) on the socket of a connection past its time; MHD's event loop then reads the end
/// of the stream and closes the connection as if the client had left (its own message says so).
///
/// Safety: MHD reports a connection closed (MHD_CONNECTION_NOTIFY_CLOSED, `closed` here) before it
/// closes the descriptor, and `closed` takes the same lock as the shutdown, so a descriptor is shut
/// down only while it still belongs to the connection it was recorded for.
final class HeadDeadline: @unchecked Sendable {
    private struct Watched {
        let socket: Int32
        let address: String
        /// Since when the connection owes a complete head; nil while a request is in progress.
        var awaitingHeadSinceMicros: Int64?
    }

    private static let checkIntervalMicros: Int64 = 1_000_000
    private let headMicrosMax: Int64
    private let nowMicros: @Sendable () -> Int64
    private let cutOff: @Sendable (_ address: String) -> Void
    private let lock = ConditionLock()
    // Guarded by `lock`.
    private var watched: [UInt64: Watched] = [:]
    private let worker = StoppableThread()

    /// - Parameter cutOff: told the peer address of each connection closed, outside the lock.
    init(
        headSecondsMax: Int, nowMicros: @escaping @Sendable () -> Int64,
        cutOff: @escaping @Sendable (_ address: String) -> Void
    ) {
        headMicrosMax = Int64(headSecondsMax) * 1_000_000
        self.nowMicros = nowMicros
        self.cutOff = cutOff
    }

    func start() {
        worker.start { [self] stop in run(until: stop) }
    }

    /// Ends the thread; after MHD_stop_daemon, which has closed every connection.
    func stop() { worker.stop() }

    func opened(_ connectionID: UInt64, socket: Int32, address: String) {
        guard socket >= 0 else { return }
        let now = nowMicros()
        lock.withLock {
            watched[connectionID] = Watched(socket: socket, address: address, awaitingHeadSinceMicros: now)
        }
    }

    func headArrived(_ connectionID: UInt64) {
        lock.withLock { watched[connectionID]?.awaitingHeadSinceMicros = nil }
    }

    /// The request is over (answered, or dropped): the next head is owed from now.
    func requestEnded(_ connectionID: UInt64) {
        let now = nowMicros()
        lock.withLock { watched[connectionID]?.awaitingHeadSinceMicros = now }
    }

    func closed(_ connectionID: UInt64) {
        _ = lock.withLock { watched.removeValue(forKey: connectionID) }
    }

    private func run(until stop: StopSignal) {
        while !stop.wait(micros: Self.checkIntervalMicros) {
            var cut: [String] = []
            lock.withLock {
                let now = nowMicros()
                for (connectionID, connection) in watched {
                    guard let since = connection.awaitingHeadSinceMicros, now - since > headMicrosMax else {
                        continue
                    }
                    shutdown(connection.socket, Int32(SHUT_RDWR))
                    watched[connectionID]?.awaitingHeadSinceMicros = nil
                    cut.append(connection.address)
                }
            }
            for address in cut { cutOff(address) }
        }
    }
}
