import Synchronization
import Threads

#if canImport(Glibc)
    import Glibc
#endif

/// A subscribing MQTT 3.1.1 client over TCP (or TLS over it, through `streamOpener`), on one thread
/// of its own, that acknowledges a QoS 1 message only when the application says so
/// (`acknowledge`), and publishes QoS 1 messages of its own (`publish`).
///
/// It connects with clean session 0, so the broker keeps the subscription and every QoS 1 message
/// not yet acknowledged while the client is away or after it crashed, and sends them again on the
/// next connection. It subscribes on every connection (harmless when the session has it already,
/// and it follows a changed filter), pings within the keep-alive, and reconnects with a doubling
/// delay after any failure. Acknowledgements of messages from a connection that has since dropped
/// are discarded: the broker redelivers those messages on the next one. A message it publishes
/// is sent again (DUP) on every new connection until the broker acknowledges it.
public final class MQTTClient: Sendable {
    private struct State: Sendable {
        var connection: UInt64 = 0
        var acknowledgements = InboundAcknowledgements()
        var outbox: [UInt8] = []
        var outbound: OutboundPublishes
        var publishCompletions: [UInt16: @Sendable (PublishOutcome) -> Void] = [:]
        var stopped = false
        var status = Status()
        var stopDeadlineMicros: Int64?
    }

    public let configuration: Configuration
    private let onMessage: @Sendable (Delivery) -> Void
    private let onEvent: @Sendable (Event) -> Void
    private let state: Mutex<State>
    private let worker = StoppableThread()
    /// Wakes the client's poll: an acknowledgement to send, or a stop. Nonblocking both ends.
    private let wakeRead: Int32
    private let wakeWrite: Int32

    /// `onMessage` runs on the client's thread, one message at a time, in the order received.
    public init(
        _ configuration: Configuration, onEvent: @escaping @Sendable (Event) -> Void = { _ in },
        onMessage: @escaping @Sendable (Delivery) -> Void
    ) {
        self.configuration = configuration
        self.onMessage = onMessage
        self.onEvent = onEvent
        state = Mutex(State(outbound: OutboundPublishes(capacity: configuration.outboundPublishesMax)))
        var ends: [Int32] = [-1, -1]
        let result = pipe(&ends)
        precondition(result == 0, "pipe failed: errno \(errno)")
        for end in ends {
            _ = fcntl(end, F_SETFL, fcntl(end, F_GETFL) | O_NONBLOCK)
            _ = fcntl(end, F_SETFD, FD_CLOEXEC)
        }
        wakeRead = ends[0]
        wakeWrite = ends[1]
    }

    deinit {
        close(wakeRead)
        close(wakeWrite)
    }

    public var status: Status { state.withLock { $0.status } }

    /// Starts the client's thread, which connects (and keeps reconnecting) in the background.
    public func start() {
        worker.start { [self] stop in run(stop) }
    }

    /// Stops reading new messages, waits up to `graceMicros` for the acknowledgements of messages
    /// already handed out, sends them and DISCONNECT, and returns once the thread is gone.
    /// Messages still unacknowledged stay with the broker's session for the next start.
    public func stop(graceMicros: Int64) {
        state.withLock { $0.stopDeadlineMicros = monotonicMicros() + graceMicros }
        worker.stopSignal.request()
        wake()
        worker.stop()
    }

    /// Acknowledges a QoS 1 message to the broker, in order after every message received before
    /// it on its connection. From any thread; it never blocks on the network.
    public func acknowledge(_ ticket: Ticket) {
        let queued = state.withLock { state -> Bool in
            guard ticket.connection == state.connection else { return false }
            let ready = state.acknowledgements.acknowledge(ticket.sequence)
            for packetID in ready {
                state.outbox += OutboundPacket.publishAcknowledgement(packetID: packetID)
            }
            state.status.acknowledgementsPending = state.acknowledgements.pendingCount
            return !ready.isEmpty
        }
        if queued { wake() }
    }

    /// Publishes `payload` on `topic` at QoS 1, now or on the next connection, and again on every
    /// new connection until the broker acknowledges it; `completion` runs exactly once, on the
    /// client's thread (acknowledged) or the caller's (refused, or stopped). Never blocks.
    public func publish(
        topic: String, payload: [UInt8], completion: @escaping @Sendable (PublishOutcome) -> Void
    ) {
        let refusal = state.withLock { state -> String? in
            if state.stopped { return "the MQTT client is stopped" }
            guard let packetID = state.outbound.enqueue(topic: topic, payload: payload) else {
                return
                    "more than \(configuration.outboundPublishesMax) messages await the broker's acknowledgement"
            }
            state.publishCompletions[packetID] = completion
            state.status.publishesPending = state.outbound.pendingCount
            return nil
        }
        if let refusal { return completion(.failed(refusal)) }
        wake()
    }

    private func wake() {
        var byte: UInt8 = 1
        _ = write(wakeWrite, &byte, 1)
    }

    // MARK: the client's thread

    private func run(_ stop: StopSignal) {
        var delayMillis = configuration.reconnectDelayMillisMin
        defer { failPendingPublishes() }
        while !stop.isRequested {
            let outcome = session(stop)
            state.withLock {
                $0.connection += 1
                $0.acknowledgements = InboundAcknowledgements()
                $0.outbound.connectionLost()
                $0.outbox = []
                $0.status.connected = false
                $0.status.subscribed = false
                $0.status.acknowledgementsPending = 0
                if case .failed(let why, _) = outcome { $0.status.lastError = why }
            }
            switch outcome {
            case .stopped: return
            case .failed(let why, let wasConnected):
                onEvent(wasConnected ? .disconnected(why) : .connectionFailed(why))
                if wasConnected { delayMillis = configuration.reconnectDelayMillisMin }
            }
            if stop.wait(micros: Int64(delayMillis) * 1000) { return }
            delayMillis = min(delayMillis * 2, configuration.reconnectDelayMillisMax)
        }
    }

    /// The client stops: every message still awaiting the broker's acknowledgement fails.
    private func failPendingPublishes() {
        let completions = state.withLock { state in
            state.stopped = true
            let ids = state.outbound.removeAll()
            state.status.publishesPending = 0
            defer { state.publishCompletions = [:] }
            return ids.compactMap { state.publishCompletions[$0] }
        }
        for completion in completions {
            completion(.failed("the MQTT client stopped before the broker acknowledged the message"))
        }
    }

    private enum SessionOutcome {
        case stopped
        /// `wasConnected`: the broker had accepted the connection (so the next attempt starts
        /// again from the shortest delay).
        case failed(String, wasConnected: Bool)
    }

    private enum Phase {
        case awaitingConnectAcknowledgement
        case awaitingSubscribeAcknowledgement
        case subscribed
    }

    private static let subscribePacketID: UInt16 = 1

    /// Where a connection stands, and when the client last spoke on it.
    private struct Link {
        var phase = Phase.awaitingConnectAcknowledgement
        var lastSentMicros: Int64
        var pingSentMicros: Int64?
        let keepAliveMicros: Int64
        let handshakeDeadlineMicros: Int64

        var wasConnected: Bool { phase == .subscribed }
    }

    private func session(_ stop: StopSignal) -> SessionOutcome {
        let socket: Int32
        switch openSocket(stop) {
        case .success(let opened): socket = opened
        case .failure(let error):
            return stop.isRequested ? .stopped : .failed(error.description, wasConnected: false)
        }
        defer { close(socket) }
        let stream: any ByteStream
        if let opener = configuration.streamOpener {
            do {
                stream = try opener(socket, configuration.host)
            } catch {
                return .failed("\(error)", wasConnected: false)
            }
        } else {
            stream = SocketStream(socket: socket)
        }
        defer { stream.close() }
        let keepAliveMicros = Int64(configuration.keepAliveSeconds) * 1_000_000
        let handshakeDeadline = monotonicMicros() + Int64(configuration.connectTimeoutMillis) * 1000
        if let why = send(
            stream,
            OutboundPacket.connect(
                clientID: configuration.clientID, cleanSession: false,
                keepAliveSeconds: configuration.keepAliveSeconds, username: configuration.username,
                password: configuration.password))
        {
            return .failed("sending CONNECT: \(why)", wasConnected: false)
        }
        var link = Link(
            lastSentMicros: monotonicMicros(), keepAliveMicros: keepAliveMicros,
            handshakeDeadlineMicros: handshakeDeadline)
        return converse(socket, stream, &link, stop)
    }

    /// The connection's life after CONNECT: keep it alive, send what is queued, read and answer the
    /// broker's packets, until a stop or a failure.
    private func converse(_ socket: Int32, _ stream: any ByteStream, _ link: inout Link, _ stop: StopSignal)
        -> SessionOutcome
    {
        var reader = PacketReader(packetBytesMax: configuration.packetBytesMax)
        var buffer = [UInt8](repeating: 0, count: 65536)
        while true {
            if stop.isRequested {
                return drain(stream, connected: link.wasConnected)
            }
            if let outcome = keepAlive(stream, &link) { return outcome }
            if let outcome = sendQueued(stream, &link) { return outcome }
            if !stream.hasBufferedBytes {
                switch waitForInput(socket, link) {
                case .readable: break
                case .idle: continue
                case .failed(let why): return .failed(why, wasConnected: link.wasConnected)
                }
            }
            let received: Int?
            do {
                received = try buffer.withUnsafeMutableBytes { try stream.receive(into: $0) }
            } catch {
                return .failed("\(error)", wasConnected: link.wasConnected)
            }
            guard let count = received else { continue }
            if count == 0 {
                return .failed("the broker closed the connection", wasConnected: link.wasConnected)
            }
            reader.append(buffer[0..<count])
            do {
                while let packet = try reader.next() {
                    if let outcome = handle(packet, stream, &link) { return outcome }
                }
            } catch {
                return .failed(
                    "the broker sent bytes that are not MQTT 3.1.1: \(error)", wasConnected: link.wasConnected
                )
            }
        }
    }

    /// The handshake's deadline and the keep-alive: a PINGREQ at half the keep-alive of silence, and
    /// the connection given up when its answer does not come within the keep-alive.
    private func keepAlive(_ stream: any ByteStream, _ link: inout Link) -> SessionOutcome? {
        let now = monotonicMicros()
        if link.phase != .subscribed && now > link.handshakeDeadlineMicros {
            return .failed("the broker did not accept the connection in time", wasConnected: false)
        }
        if let sent = link.pingSentMicros, now - sent > link.keepAliveMicros {
            return .failed("the broker did not answer a ping within the keep-alive", wasConnected: true)
        }
        if link.keepAliveMicros > 0 && link.pingSentMicros == nil
            && now - link.lastSentMicros >= link.keepAliveMicros / 2
        {
            if let why = send(stream, OutboundPacket.pingRequest) {
                return .failed("sending PINGREQ: \(why)", wasConnected: link.wasConnected)
            }
            link.lastSentMicros = now
            link.pingSentMicros = now
        }
        return nil
    }

    /// The PUBACKs `acknowledge` queued, and, once the broker accepted the connection, the messages
    /// `publish` queued that this connection has not sent yet.
    private func sendQueued(_ stream: any ByteStream, _ link: inout Link) -> SessionOutcome? {
        var outgoing = takeOutbox()
        if link.phase != .awaitingConnectAcknowledgement {
            // After the CONNACK only (MQTT-3.1.4-5 lets the broker drop anything earlier).
            for message in state.withLock({ $0.outbound.takeUnsent() }) {
                outgoing += OutboundPacket.publish(message)
            }
        }
        if !outgoing.isEmpty {
            if let why = send(stream, outgoing) {
                return .failed("sending PUBACK or PUBLISH: \(why)", wasConnected: link.wasConnected)
            }
            link.lastSentMicros = monotonicMicros()
        }
        return nil
    }

    private enum Readiness {
        case readable
        /// Nothing to read yet: a wake-up, a timeout or a signal.
        case idle
        case failed(String)
    }

    /// Waits for the broker's bytes or a wake-up (an acknowledgement to send, a stop), at most a
    /// quarter of the keep-alive and at most a second.
    private func waitForInput(_ socket: Int32, _ link: Link) -> Readiness {
        var descriptors = [
            pollfd(fd: socket, events: Int16(POLLIN), revents: 0),
            pollfd(fd: wakeRead, events: Int16(POLLIN), revents: 0),
        ]
        let waitMillis = link.keepAliveMicros > 0 ? Int32(max(10, link.keepAliveMicros / 4000)) : 1000
        let ready = poll(&descriptors, 2, min(waitMillis, 1000))
        if ready < 0 && errno != EINTR {
            return .failed("poll: \(errnoText())")
        }
        if descriptors[1].revents != 0 { drainWakePipe() }
        return descriptors[0].revents != 0 ? .readable : .idle
    }

    /// One packet from the broker, in the connection's phase: nil to go on, else how the session ends.
    private func handle(_ packet: InboundPacket, _ stream: any ByteStream, _ link: inout Link)
        -> SessionOutcome?
    {
        switch (link.phase, packet) {
        case (.awaitingConnectAcknowledgement, .connectAcknowledged(let present, 0)):
            if let why = send(
                stream,
                OutboundPacket.subscribe(
                    packetID: Self.subscribePacketID, filters: configuration.topicFilters, qos: 1))
            {
                return .failed("sending SUBSCRIBE: \(why)", wasConnected: false)
            }
            link.lastSentMicros = monotonicMicros()
            link.phase = .awaitingSubscribeAcknowledgement
            state.withLock {
                $0.status.connected = true
                $0.status.connections += 1
            }
            onEvent(.connected(sessionPresent: present))
        case (.awaitingConnectAcknowledgement, .connectAcknowledged(_, let code)):
            return .failed("the broker refused the connection: \(refusal(code))", wasConnected: false)
        case (.awaitingSubscribeAcknowledgement, .subscribeAcknowledged(Self.subscribePacketID, let granted)):
            guard granted.count == configuration.topicFilters.count, granted.allSatisfy({ $0 <= 2 }) else {
                return .failed(
                    "the broker refused the subscription to "
                        + configuration.topicFilters.joined(separator: ", ")
                        + " (check its ACL for this login)", wasConnected: true)
            }
            link.phase = .subscribed
            state.withLock { $0.status.subscribed = true }
        case (.awaitingSubscribeAcknowledgement, .publish(let message)),
            (.subscribed, .publish(let message)):
            // A resumed session may deliver before the SUBACK.
            deliver(message)
        case (_, .pingResponse):
            link.pingSentMicros = nil
        case (.awaitingSubscribeAcknowledgement, .publishAcknowledged(let packetID)),
            (.subscribed, .publishAcknowledged(let packetID)):
            published(packetID)
        default:
            return .failed("the broker sent \(packet) at the wrong time", wasConnected: link.wasConnected)
        }
        return nil
    }

    private func published(_ packetID: UInt16) {
        let completion = state.withLock { state -> (@Sendable (PublishOutcome) -> Void)? in
            guard state.outbound.acknowledged(packetID: packetID) else { return nil }
            state.status.publishesPending = state.outbound.pendingCount
            state.status.publishesAcknowledged += 1
            return state.publishCompletions.removeValue(forKey: packetID)
        }
        completion?(.acknowledged)
    }

    private func deliver(_ message: Publish) {
        let oversized = message.oversizedPayloadBytes == nil ? 0 : 1
        var ticket: Ticket?
        if message.qos >= 1, let packetID = message.packetID {
            ticket = state.withLock { state in
                let sequence = state.acknowledgements.received(packetID: packetID)
                state.status.messagesReceived += 1
                state.status.oversizedMessagesReceived += oversized
                state.status.acknowledgementsPending = state.acknowledgements.pendingCount
                return Ticket(connection: state.connection, sequence: sequence)
            }
        } else {
            state.withLock {
                $0.status.messagesReceived += 1
                $0.status.oversizedMessagesReceived += oversized
            }
        }
        onMessage(Delivery(publish: message, ticket: ticket))
    }

    /// The way out of a stop: no more reading; the acknowledgements of messages handed out are
    /// sent as they come until none is pending or the grace period ends, then DISCONNECT (which
    /// keeps the session: clean session 0).
    private func drain(_ stream: any ByteStream, connected: Bool) -> SessionOutcome {
        let deadline = state.withLock { $0.stopDeadlineMicros } ?? monotonicMicros()
        while true {
            let outgoing = takeOutbox()
            let pending = state.withLock { $0.acknowledgements.pendingCount }
            if !outgoing.isEmpty && send(stream, outgoing) != nil { return .stopped }
            let now = monotonicMicros()
            if pending == 0 || now >= deadline { break }
            var descriptor = pollfd(fd: wakeRead, events: Int16(POLLIN), revents: 0)
            _ = poll(&descriptor, 1, Int32(min(1000, max(1, (deadline - now) / 1000))))
            drainWakePipe()
        }
        if connected { _ = send(stream, OutboundPacket.disconnect) }
        return .stopped
    }

    /// The PUBACKs queued by `acknowledge`, counted as sent (the outbox holds nothing else).
    private func takeOutbox() -> [UInt8] {
        state.withLock { state in
            defer { state.outbox = [] }
            state.status.acknowledgementsSent += state.outbox.count / 4
            return state.outbox
        }
    }

    private func drainWakePipe() {
        var bytes = [UInt8](repeating: 0, count: 64)
        while read(wakeRead, &bytes, bytes.count) > 0 {}
    }

    private func refusal(_ code: UInt8) -> String {
        switch code {
        case 1: "unacceptable protocol version (the broker does not speak MQTT 3.1.1)"
        case 2: "client identifier rejected"
        case 3: "server unavailable"
        case 4: "bad user name or password (check the login and password findmy was given)"
        // mosquitto answers this one to a wrong password too.
        case 5: "not authorized (check the login and password findmy was given, and the broker's ACL)"
        default: "return code \(code)"
        }
    }

    // MARK: sockets

    private struct SocketError: Error, CustomStringConvertible {
        var description: String
    }

    /// Resolves the host and connects to the first address that answers within the timeout;
    /// a stop interrupts the wait.
    private func openSocket(_ stop: StopSignal) -> Result<Int32, SocketError> {
        var hints = addrinfo()
        hints.ai_family = AF_UNSPEC
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        var list: UnsafeMutablePointer<addrinfo>?
        let resolved = getaddrinfo(configuration.host, String(configuration.port), &hints, &list)
        guard resolved == 0, let first = list else {
            return .failure(
                SocketError(
                    description:
                        "cannot resolve '\(configuration.host)': \(String(cString: gai_strerror(resolved)))"))
        }
        defer { freeaddrinfo(list) }
        var lastError = "no address for '\(configuration.host)'"
        var candidate: UnsafeMutablePointer<addrinfo>? = first
        while let address = candidate {
            candidate = address.pointee.ai_next
            let socket = Glibc.socket(
                address.pointee.ai_family, address.pointee.ai_socktype | Int32(SOCK_CLOEXEC.rawValue),
                address.pointee.ai_protocol)
            guard socket >= 0 else {
                lastError = "socket: \(errnoText())"
                continue
            }
            switch connectWithin(socket, address.pointee, stop) {
            case nil:
                var one: Int32 = 1
                setsockopt(socket, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
                // Sends block at most this long, so a broker that stops reading cannot hold the
                // thread; nor can one that stops in the middle of a TLS record or handshake.
                var timeout = timeval(tv_sec: 10, tv_usec: 0)
                setsockopt(socket, SOL_SOCKET, SO_SNDTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
                setsockopt(socket, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
                return .success(socket)
            case let error?:
                lastError = error
                close(socket)
                if stop.isRequested { break }
            }
        }
        return .failure(
            SocketError(
                description: "cannot connect to \(configuration.host):\(configuration.port): \(lastError)"))
    }

    /// nil once connected; else why not.
    private func connectWithin(_ socket: Int32, _ address: addrinfo, _ stop: StopSignal) -> String? {
        let flags = fcntl(socket, F_GETFL)
        _ = fcntl(socket, F_SETFL, flags | O_NONBLOCK)
        defer { _ = fcntl(socket, F_SETFL, flags) }
        if Glibc.connect(socket, address.ai_addr, address.ai_addrlen) == 0 { return nil }
        guard errno == EINPROGRESS else { return errnoText() }
        let deadline = monotonicMicros() + Int64(configuration.connectTimeoutMillis) * 1000
        while true {
            if stop.isRequested { return "stopping" }
            let now = monotonicMicros()
            if now >= deadline { return "timed out" }
            var descriptors = [
                pollfd(fd: socket, events: Int16(POLLOUT), revents: 0),
                pollfd(fd: wakeRead, events: Int16(POLLIN), revents: 0),
            ]
            _ = poll(&descriptors, 2, Int32(min(1000, (deadline - now) / 1000 + 1)))
            if descriptors[1].revents != 0 { drainWakePipe() }
            if descriptors[0].revents != 0 { break }
        }
        var error: Int32 = 0
        var length = socklen_t(MemoryLayout<Int32>.size)
        getsockopt(socket, SOL_SOCKET, SO_ERROR, &error, &length)
        return error == 0 ? nil : String(cString: strerror(error))
    }

    /// Sends every byte; why not on a failure (the connection is then given up).
    private func send(_ stream: any ByteStream, _ bytes: [UInt8]) -> String? {
        do {
            try stream.send(bytes)
            return nil
        } catch {
            return "\(error)"
        }
    }

    private func errnoText() -> String { String(cString: strerror(errno)) }
}
