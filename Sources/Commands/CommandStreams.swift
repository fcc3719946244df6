import Core
import Events
import HTTP
import Identity
import JSON
import Synchronization
import Threads

/// The limits of command streams (docs/commands.md, "Command stream"), each with its unit.
public struct CommandStreamLimits: Sendable, Equatable {
    /// A stream that wrote nothing for this long gets a `: heartbeat` comment, which keeps proxies
    /// and NATs from dropping a quiet connection and finds out a client that left.
    public var heartbeatSeconds = 25
    /// Streams open at once on this server; one more answers 503 `too_many_streams`.
    public var streamsMax = 1_024
    /// What the `retry:` field tells a client to wait before it reconnects.
    public var reconnectMillis = 5_000
    /// Bytes held for a client that does not read before its stream is cut (events are small: a
    /// `lost` with the longest message is under 1 KiB, so this is dozens of them).
    public var bufferedBytesMax = 64 << 10
    /// What a refused client is told to wait (`Retry-After`).
    public var retryAfterSeconds = 30

    public init() {}
}

/// The command streams of devices that hold a connection (`GET /api/find-my/device/commands/stream`,
/// Server-Sent Events): each connection is told the device's open commands (`ready`, then those
/// after its `Last-Event-ID`), every new one the moment the registry folds it, `ended` when one
/// closes, and a heartbeat when quiet. One stream per device: a newer connection closes the older.
///
/// Threads: no thread per stream. A stream is an HTTP `PushedStream`, written without waiting; the
/// connect runs on an HTTP worker for a moment (`attach`), and everything after on this service's
/// one thread, woken by the registry's command feed (`RegistryCell`), by a stream that closed, or
/// when a heartbeat is due. Every stream's writes happen under `state`'s lock, so a stream's events
/// are in the order the registry folded them.
public final class CommandStreams: Service {
    public let name = "command-streams"
    let identity: IdentityService
    public let limits: CommandStreamLimits
    /// Heartbeats are due by this clock (monotonic microseconds); tests move it.
    let clockMicros: @Sendable () -> Int64
    private let shared = Mutex(State())
    private let bell = Doorbell()
    private let worker = StoppableThread()

    struct Entry {
        let stream: PushedStream
        let tokenHash: [UInt8]
        /// The feed's number when the stream began: the changes before it are in its `ready`.
        let feedFrom: UInt64
        /// The commands the client was told are open (its `ready` and `command` events since).
        var known: Set<UUID128>
        var lastWriteMicros: Int64
    }

    struct State {
        var streams: [UInt64: Entry] = [:]
        /// Connections admitted whose stream has not begun yet (`Reservation`).
        var reserved = 0
        /// The next change of the registry's command feed to look at.
        var feedNext: UInt64 = 0
        var stopped = false
    }

    public init(
        identity: IdentityService, limits: CommandStreamLimits = CommandStreamLimits(),
        clockMicros: @escaping @Sendable () -> Int64 = monotonicMicros
    ) {
        precondition(limits.heartbeatSeconds > 0 && limits.streamsMax >= 0)
        self.identity = identity
        self.limits = limits
        self.clockMicros = clockMicros
    }

    /// Streams open now.
    public var openCount: Int { shared.withLock { $0.streams.count } }

    // MARK: the service

    public var state: ServiceState {
        worker.isRunning ? .running : (worker.stopSignal.isRequested ? .stopped : .idle)
    }

    public func start() throws {
        let store = identity.store
        let next = store.registry.read { $0.registry.commandFeed.nextNumber }
        shared.withLock { $0.feedNext = next }
        store.registry.watchCommandFeed(bell)
        let bell = self.bell
        worker.start { [self] stop in
            stop.addDoorbell(bell)
            defer { stop.removeDoorbell(bell) }
            while !stop.isRequested {
                let dueMicros = runDue()
                // The heartbeat clock may be a test's; a real one is never more than a second off.
                let waitMicros = min(max(dueMicros - clockMicros(), 1_000), 1_000_000)
                _ = bell.wait(untilMonotonicMicros: monotonicMicros() + waitMicros)
            }
        }
    }

    /// Closes every stream (its clients reconnect to the next server) and stops the thread.
    public func stop(graceMicros: Int64) {
        identity.store.registry.unwatchCommandFeed(bell)
        worker.stop()
        let streams = shared.withLock { state in
            state.stopped = true
            defer { state.streams = [:] }
            return state.streams.values.map(\.stream)
        }
        for stream in streams { stream.close() }
    }

    // MARK: connecting

    /// A place among the `streamsMax` streams, taken by a connection before its answer's head goes
    /// out and given back when its stream ends, or when the answer is dropped unsent (the server
    /// stopped first): then this object goes with it.
    final class Reservation: Sendable {
        let streams: CommandStreams
        private let taken = Atomic(false)

        init(_ streams: CommandStreams) { self.streams = streams }

        /// Hands the place to the stream; false when that already happened.
        func take() -> Bool { !taken.exchange(true, ordering: .relaxed) }

        deinit {
            if !taken.load(ordering: .relaxed) { streams.shared.withLock { $0.reserved -= 1 } }
        }
    }

    /// A place for a stream of `deviceID`, or nil when the server holds `streamsMax` already. A
    /// device that has a stream always gets one: its new stream replaces the old.
    func reserve(deviceID: UInt64) -> Reservation? {
        let admitted = shared.withLock { state in
            guard !state.stopped else { return false }
            guard state.streams[deviceID] != nil || state.streams.count + state.reserved < limits.streamsMax
            else { return false }
            state.reserved += 1
            return true
        }
        return admitted ? Reservation(self) : nil
    }

    /// Begins the stream: `ready`, the open commands after `lastEventID`, each recorded as sent
    /// through channel `stream` the first time; then it is followed by `runDue`. Closes the
    /// device's older stream.
    func attach(
        _ stream: PushedStream, reservation: Reservation, deviceID: UInt64, tokenHash: [UInt8],
        lastEventID: UInt64?
    ) {
        guard reservation.take() else { return }
        let store = identity.store
        let replaced: PushedStream? = shared.withLock { state in
            state.reserved -= 1
            if state.stopped {
                stream.close()
                return nil
            }
            // Read before the open commands: a change between the two reads is then both in the
            // stream's `ready` and after `feedFrom`, and `known` keeps it from being sent twice.
            let feedFrom = store.registry.read { $0.registry.commandFeed.nextNumber }
            let open = store.commandsForAnswer(deviceID: deviceID, channel: Self.channel)
            var text = "retry: \(limits.reconnectMillis)\n\n" + Self.readyEvent(open)
            for command in open where lastEventID.map({ command.requestOffset > $0 }) ?? true {
                text += Self.commandEvent(command)
            }
            stream.send(Array(text.utf8))
            let older = state.streams.updateValue(
                Entry(
                    stream: stream, tokenHash: tokenHash, feedFrom: feedFrom,
                    known: Set(open.map(\.request.commandID)), lastWriteMicros: clockMicros()),
                forKey: deviceID)
            return older?.stream
        }
        // The stream's end (the client left, a newer one, the server stopped) wakes the thread,
        // which forgets it; never more than a doorbell here, as MHD may call this on its own thread.
        stream.onClose { [bell] in bell.ring() }
        replaced?.close()
        StructuredLog.info(
            "command_stream_opened",
            [
                "device_id": .int(Int64(deviceID)),
                "last_event_id": .string(lastEventID.map { String($0) } ?? ""),
                "replaced": .bool(replaced != nil),
            ])
    }

    /// The channel name of a command written to a stream, in `command_sent` and the API's
    /// `deliveries`.
    public static let channel = "stream"

    // MARK: following

    /// One round of the thread, also what tests call with their clock: forgets streams that ended,
    /// writes what the command feed says since the last round, and heartbeats (after a look at the
    /// socket) to streams quiet for `heartbeatSeconds`. Returns when the next heartbeat is due.
    @discardableResult
    public func runDue() -> Int64 {
        let store = identity.store
        return shared.withLock { state -> Int64 in
            state.streams = state.streams.filter { !$0.value.stream.isClosed }
            let (changes, next) = store.registry.read {
                ($0.registry.commandFeed.changes(from: state.feedNext), $0.registry.commandFeed.nextNumber)
            }
            if let changes {
                for (number, change) in changes { follow(change, number: number, &state) }
            } else {
                // Fell behind the feed's ring (thousands of changes in one round): which commands
                // closed is lost, so every stream starts over; the clients' `ready` says what is open.
                for entry in state.streams.values { entry.stream.close() }
                state.streams = [:]
            }
            state.feedNext = next
            return heartbeat(&state)
        }
    }

    private func follow(_ change: CommandFeed.Change, number: UInt64, _ state: inout State) {
        switch change {
        case .requested(let deviceID, let commandID, _):
            guard var entry = state.streams[deviceID], number >= entry.feedFrom,
                !entry.known.contains(commandID)
            else { return }
            // The hand-out of report answers: records `command_sent` for channel `stream` once,
            // and leaves out a command whose requester may no longer command the device.
            let open = identity.store.commandsForAnswer(deviceID: deviceID, channel: Self.channel)
            guard let command = open.first(where: { $0.request.commandID == commandID }) else { return }
            entry.known.insert(commandID)
            write(Self.commandEvent(command), to: &entry)
            state.streams[deviceID] = entry
        case .closed(let deviceID, let commandID, let closedState, let reason):
            guard var entry = state.streams[deviceID], number >= entry.feedFrom,
                entry.known.remove(commandID) != nil
            else { return }
            write(Self.endedEvent(commandID: commandID, state: closedState, reason: reason), to: &entry)
            state.streams[deviceID] = entry
        case .credentialsChanged(let deviceID):
            guard let entry = state.streams[deviceID] else { return }
            let valid = identity.store.registry.read {
                $0.registry.principal(tokenHash: entry.tokenHash) == .device(deviceID)
                    && $0.registry.liveDevice(deviceID) != nil
            }
            guard !valid else { return }
            entry.stream.close()
            state.streams[deviceID] = nil
            StructuredLog.info(
                "command_stream_ended",
                ["device_id": .int(Int64(deviceID)), "reason": .string("token revoked or device removed")])
        }
    }

    /// Heartbeats every stream quiet for `heartbeatSeconds` whose client is still there, and forgets
    /// those whose client left; when the next one is due.
    private func heartbeat(_ state: inout State) -> Int64 {
        let now = clockMicros()
        let intervalMicros = Int64(limits.heartbeatSeconds) * 1_000_000
        var nextDue = now + intervalMicros
        for (deviceID, var entry) in state.streams {
            if now - entry.lastWriteMicros >= intervalMicros {
                if entry.stream.peerHasLeft() {
                    state.streams[deviceID] = nil
                    continue
                }
                write(": heartbeat\n\n", to: &entry)
                state.streams[deviceID] = entry
            }
            nextDue = min(nextDue, entry.lastWriteMicros + intervalMicros)
        }
        return nextDue
    }

    private func write(_ text: String, to entry: inout Entry) {
        entry.stream.send(Array(text.utf8))
        entry.lastWriteMicros = clockMicros()
    }

    // MARK: events

    static func readyEvent(_ open: [CommandBook.Open]) -> String {
        var writer = JSONWriter(capacity: 64 + open.count * 40)
        writer.beginObject()
        writer.key("open")
        writer.beginArray()
        for command in open { writer.string(command.request.commandID.description) }
        writer.endArray()
        writer.endObject()
        return "event: ready\ndata: " + String(decoding: writer.bytes, as: UTF8.self) + "\n\n"
    }

    static func commandEvent(_ command: CommandBook.Open) -> String {
        var writer = JSONWriter(capacity: 256)
        IdentityService.writeCommand(command, to: &writer)
        return "id: \(command.requestOffset)\nevent: command\ndata: "
            + String(decoding: writer.bytes, as: UTF8.self) + "\n\n"
    }

    static func endedEvent(commandID: UUID128, state: String, reason: String) -> String {
        var writer = JSONWriter(capacity: 128)
        writer.beginObject()
        writer.key("command_id")
        writer.string(commandID.description)
        writer.key("state")
        writer.string(state)
        writer.key("reason")
        writer.string(reason)
        writer.endObject()
        return "event: ended\ndata: " + String(decoding: writer.bytes, as: UTF8.self) + "\n\n"
    }
}
