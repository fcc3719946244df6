import CLI
import Commands
import Crypto
import Events
import Identity
import Ingest
import JSON
import MQTT
import Synchronization
import TLS
import Threads

#if canImport(Glibc)
    import Glibc
#endif

/// OwnTracks in MQTT mode (`findmy serve --mqtt-url`): findmy subscribes to the phones' topics on
/// the broker they publish to. A message on `owntracks/<user>/<device>` belongs to the findmy user
/// named <user>; its first message enrols the device <device> under a UUID derived from the topic.
/// The payload goes through the same OwnTracks decoder as the HTTP endpoint and the same report
/// path as every app, and a QoS 1 message is acknowledged to the broker only once its report is
/// durable in the log (docs/clients.md, "OwnTracks (MQTT)").
public final class OwnTracksMQTTService: Service, StatusSource {
    public struct Configuration: Sendable {
        var host: String
        var port: UInt16
        /// `mqtts://`: TLS, the broker's certificate checked against `caFile` or the system's CAs.
        var tls = false
        var caFile: String?
        var username: String?
        var passwordFile: String?
        var topic: TopicFilter
        /// nil: the one kept in DATA_DIR/mqtt-client-id (made on the first start).
        var clientID: String?
        var testHold: TestHold?
    }

    /// A test-only stop between receipt and acknowledgement (`FINDMY_TEST_MQTT_HOLD`): the
    /// message is held and never acknowledged, and the line `mqtt_test_hold` tells the test it
    /// may SIGKILL the server now.
    enum TestHold: String, Sendable {
        /// Received, never appended.
        case beforeAppend = "before-append"
        /// Appended and durable, never acknowledged.
        case beforeAcknowledgement = "before-ack"
    }

    /// Why a message was acknowledged without being stored, for `/metrics`.
    enum Drop: String, CaseIterable, Sendable {
        case unknownUser = "unknown_user"
        case invalidDeviceName = "invalid_device_name"
        case topic = "topic"
        case paused = "paused"
        case removedDevice = "removed_device"
    }

    /// The largest MQTT packet findmy reads. A message beyond it is acknowledged unread and kept as
    /// a `too_large` rejection (docs/clients.md): a location is a few hundred bytes, a card with a
    /// photo tens of kilobytes.
    static let packetBytesMax = 1 << 20

    /// A removed device's topic is logged at most once in this many seconds (a phone keeps
    /// publishing every few minutes until someone changes its settings).
    static let removedDeviceLogWindowSeconds: Int64 = 3600
    /// Topics whose last such line is remembered; beyond it the memory starts again (a line more).
    static let removedTopicsRememberedMax = 10_000

    private struct Counters: Sendable {
        var dropped: [Drop: Int] = [:]
        var enrolled = 0
        var stored = 0
        var duplicates = 0
        var failed = 0
        /// A removed device's topic → when its last `mqtt_removed_device` line was written.
        var removedLoggedMicros: [String: Int64] = [:]
    }

    public let name = "mqtt"
    let configuration: Configuration
    /// The device's topic and its subtopics: OwnTracks publishes locations (and its `lwt`) on the
    /// device's topic, region transitions on `<topic>/event` and waypoints on `<topic>/waypoint`
    /// and `<topic>/waypoints` (OwnTracks booklet, "Topics"). nil: the device's topic itself.
    let filters: [(filter: TopicFilter, subtopic: String?)]
    static let subtopics = ["event", "waypoint", "waypoints"]
    private let ingest: IngestService
    private let dataDirectory: String
    private let client = Locked<MQTTClient?>(nil)
    /// Commands to the phones this service enrolled (`reportLocation` on `<topic>/cmd`), through
    /// this service's client: the lead hands it to the commands dispatcher.
    let commandChannel: OwnTracksMQTTChannel
    private let counters = Mutex(Counters())
    private let serviceState = Mutex(ServiceState.idle)

    init(_ configuration: Configuration, ingest: IngestService, dataDirectory: String) {
        self.configuration = configuration
        filters =
            [(configuration.topic, nil)]
            + Self.subtopics.map { subtopic in
                // The base has its two wildcards; a constant level more keeps them two.
                (TopicFilter(configuration.topic.description + "/" + subtopic, wildcards: 2)!, subtopic)
            }
        self.ingest = ingest
        self.dataDirectory = dataDirectory
        commandChannel = OwnTracksMQTTChannel(
            ingest: ingest, topicFilter: configuration.topic, client: { [client] in client.withLock { $0 } })
    }

    public var state: ServiceState { serviceState.withLock { $0 } }

    /// Reads the password file and the client id, and starts the client, which connects in the
    /// background: a broker that is down delays nothing else (it shows in /healthz and is retried).
    public func start() throws {
        var password: [UInt8]?
        if let file = configuration.passwordFile {
            password = try Self.readPassword(file)
        }
        let clientID = try configuration.clientID ?? Self.clientID(dataDirectory: dataDirectory)
        var clientConfiguration = MQTTClient.Configuration(
            host: configuration.host, port: configuration.port, clientID: clientID,
            username: configuration.username, password: password,
            topicFilters: filters.map(\.filter.description)
        )
        clientConfiguration.reconnectDelayMillisMax = 30_000
        clientConfiguration.packetBytesMax = Self.packetBytesMax
        if configuration.tls {
            let caFile = configuration.caFile
            clientConfiguration.streamOpener = { socket, host in
                try TLSClientStream(socket: socket, host: host, caFile: caFile)
            }
        }
        let broker = "\(configuration.host):\(configuration.port)"
        let started = MQTTClient(
            clientConfiguration,
            onEvent: { event in
                switch event {
                case .connected(let sessionPresent):
                    StructuredLog.info(
                        "mqtt_connected",
                        ["broker": .string(broker), "session_present": .bool(sessionPresent)])
                case .connectionFailed(let why):
                    StructuredLog.error(
                        "mqtt_connection_failed", ["broker": .string(broker), "error": .string(why)])
                case .disconnected(let why):
                    StructuredLog.error(
                        "mqtt_disconnected", ["broker": .string(broker), "error": .string(why)])
                }
            },
            onMessage: { [weak self] delivery in self?.handle(delivery) })
        client.withLock { $0 = started }
        started.start()
        serviceState.withLock { $0 = .running }
    }

    /// Waits up to the grace period for the acknowledgements of messages being appended, then
    /// disconnects; what is not acknowledged stays in the broker's session for the next start.
    public func stop(graceMicros: Int64) {
        client.withLock { $0 }?.stop(graceMicros: graceMicros)
        serviceState.withLock { $0 = .stopped }
    }

    // MARK: messages

    /// On the client's thread, one message at a time. Never throws: every way out either
    /// acknowledges (stored, a duplicate, or never storable) or leaves the message to the broker.
    private func handle(_ delivery: MQTTClient.Delivery) {
        let publish = delivery.publish
        let acknowledge: @Sendable () -> Void = { [self] in
            if let ticket = delivery.ticket { client.withLock { $0 }?.acknowledge(ticket) }
        }
        guard
            let (levels, subtopic) = filters.lazy.compactMap({ entry in
                entry.filter.match(publish.topic).map { ($0, entry.subtopic) }
            }).first
        else {
            return drop(.topic, acknowledge, ["topic": .string(StructuredLog.sanitized(publish.topic))])
        }
        let (userName, deviceName) = (levels[0], levels[1])
        // The device is its topic's: a transition on <topic>/event belongs to the same device.
        let deviceTopic = subtopic.map { String(publish.topic.dropLast($0.count + 1)) } ?? publish.topic
        let device: IngestService.TopicDevice
        do {
            device = try ingest.topicDevice(
                userName: userName, deviceName: deviceName, uuid: Self.deviceUUID(topic: deviceTopic),
                platform: "owntracks")
        } catch {
            // The enrolment's append failed: the log is failing; the broker keeps the message.
            counters.withLock { $0.failed += 1 }
            return StructuredLog.error("mqtt_message_not_stored", ["error": .string(error.message)])
        }
        let deviceID: UInt64
        switch device {
        case .unknownUser:
            return drop(.unknownUser, acknowledge, ["user": .string(StructuredLog.sanitized(userName))])
        case .invalidDeviceName(let why):
            return drop(.invalidDeviceName, acknowledge, ["error": .string(why)])
        case .removed(let removedID):
            return droppedRemoved(topic: deviceTopic, deviceID: removedID, acknowledge)
        case .device(let id, let enrolled):
            deviceID = id
            if enrolled { counters.withLock { $0.enrolled += 1 } }
        }
        if let payloadBytes = publish.oversizedPayloadBytes {
            StructuredLog.error(
                "mqtt_message_too_large",
                [
                    "topic": .string(StructuredLog.sanitized(publish.topic)),
                    "bytes": .int(Int64(payloadBytes)),
                    "bytes_max": .int(Int64(Self.packetBytesMax)),
                ])
            return submit(
                Self.oversizedReport(publish, payloadBytes: payloadBytes, deviceID: deviceID),
                deviceID: deviceID, deviceTopic: deviceTopic, acknowledge)
        }
        var decoded = OwnTracks.Decoded()
        if let document = try? JSONParser.parse(publish.payload), OwnTracks.type(of: document) == "encrypted"
        {
            // The payload key of the HTTP mode is the device token, which an MQTT device has none of.
            decoded.rejections.append(
                .init(
                    index: 0,
                    FixRejection(
                        .malformed,
                        "an encrypted OwnTracks message over MQTT; findmy cannot open it in MQTT mode: clear the "
                            + "app's encryption key (docs/clients.md)")))
        } else {
            decoded = OwnTracks.decode(publish.payload, deviceID: deviceID, clientProtocol: .owntracksMQTT)
        }
        for type in decoded.counted { ingest.recordClientMessage(.owntracksMQTT, type: type) }
        var report = ClientReport(
            deviceID: deviceID,
            // The same message redelivered (a lost PUBACK, a crash before it, a retained copy) has
            // the same bytes, so the same batch id: stored once, answered as a duplicate after.
            batchID: ClientReport.derivedBatchID(
                deviceID: deviceID, clientProtocol: .owntracksMQTT, body: publish.payload),
            clientProtocol: .owntracksMQTT, items: decoded.items, rejections: decoded.rejections,
            places: decoded.places)
        // A location sent for a reportLocation command (`t: "r"`) answers the oldest open locate
        // (docs/commands.md), as over HTTP.
        if decoded.items.contains(where: { $0.fix.source == "ondemand" }) { report.answers = .oldestLocate }
        submit(report, deviceID: deviceID, deviceTopic: deviceTopic, acknowledge)
    }

    /// A message too large to read, as the report that records it: one `too_large` rejection, in
    /// the device's arrivals like any message that can never be valid. Its batch id cannot come
    /// from the payload, which was never read whole; it comes from what was read (the topic, the
    /// size, the first bytes), so a redelivery is recorded once. Not from the packet id: a
    /// retained message comes again with a new one on every connection's SUBSCRIBE.
    static func oversizedReport(_ publish: Publish, payloadBytes: Int, deviceID: UInt64) -> ClientReport {
        let identity =
            Array("too_large\n\(publish.topic)\n\(payloadBytes)\n".utf8) + publish.payload
        let rejection = FixRejection(
            .tooLarge,
            "an MQTT message of \(payloadBytes) bytes, more than the \(packetBytesMax) findmy reads; it "
                + "was acknowledged and discarded unread (docs/clients.md)")
        return ClientReport(
            deviceID: deviceID,
            batchID: ClientReport.derivedBatchID(
                deviceID: deviceID, clientProtocol: .owntracksMQTT, body: identity),
            clientProtocol: .owntracksMQTT, items: [], rejections: [.init(index: 0, rejection)], places: [])
    }

    /// Appends the message's report and acknowledges the message once it is durable (or known).
    private func submit(
        _ report: ClientReport, deviceID: UInt64, deviceTopic: String,
        _ acknowledge: @escaping @Sendable () -> Void
    ) {
        if configuration.testHold == .beforeAppend { return testHold(deviceID) }
        let hold = configuration.testHold
        ingest.submit(report) { [self] outcome in
            switch outcome {
            case .stored: counters.withLock { $0.stored += 1 }
            case .duplicate: counters.withLock { $0.duplicates += 1 }
            case .empty: break
            case .paused: counters.withLock { $0.dropped[.paused, default: 0] += 1 }
            case .inProgress:
                // Another copy of this message (received earlier on this connection) is being
                // appended; acknowledgements leave in arrival order, so this one's PUBACK cannot
                // go out before that copy is durable.
                break
            case .failed(let error):
                counters.withLock { $0.failed += 1 }
                return StructuredLog.error("mqtt_message_not_stored", ["error": .string(error.message)])
            }
            if let hold, hold == .beforeAcknowledgement { return Self.logTestHold(deviceID, hold) }
            acknowledge()
            publishWaypoints(deviceID: deviceID, topic: deviceTopic)
        }
    }

    /// The server's geofences naming this phone, on its `<topic>/cmd`, once after each change
    /// (Clients' FenceWaypoints); sent again after the next message when the broker did not take it.
    private func publishWaypoints(deviceID: UInt64, topic: String) {
        guard let payload = FenceWaypoints.shared.take(for: deviceID, identity: ingest.identity) else {
            return
        }
        guard let client = client.withLock({ $0 }) else { return FenceWaypoints.shared.forget(deviceID) }
        client.publish(topic: topic + "/cmd", payload: payload) { outcome in
            if case .failed = outcome { FenceWaypoints.shared.forget(deviceID) }
        }
    }

    private func drop(
        _ reason: Drop, _ acknowledge: () -> Void, _ fields: KeyValuePairs<String, StructuredLog.Field>
    ) {
        counters.withLock { $0.dropped[reason, default: 0] += 1 }
        switch reason {
        case .unknownUser: StructuredLog.error("mqtt_unknown_user", fields)
        case .invalidDeviceName: StructuredLog.error("mqtt_invalid_device_name", fields)
        default: StructuredLog.error("mqtt_unexpected_topic", fields)
        }
        acknowledge()
    }

    /// A message of a device its owner removed: acknowledged (the broker must not keep sending it)
    /// and dropped, with one line per topic per window saying how to take the device back.
    private func droppedRemoved(topic: String, deviceID: UInt64, _ acknowledge: () -> Void) {
        let now = monotonicMicros()
        let logs = counters.withLock { counted -> Bool in
            counted.dropped[.removedDevice, default: 0] += 1
            if let last = counted.removedLoggedMicros[topic],
                now - last < Self.removedDeviceLogWindowSeconds * 1_000_000
            {
                return false
            }
            if counted.removedLoggedMicros.count >= Self.removedTopicsRememberedMax {
                counted.removedLoggedMicros = [:]
            }
            counted.removedLoggedMicros[topic] = now
            return true
        }
        if logs {
            StructuredLog.info(
                "mqtt_removed_device",
                [
                    "topic": .string(StructuredLog.sanitized(topic)), "device_id": .int(Int64(deviceID)),
                    "device_uuid": .string(Self.deviceUUID(topic: topic).description),
                    "hint": .string(
                        "its owner removed this device, so its messages are acknowledged and dropped; to take "
                            + "it back, the owner enrols this device_uuid again (POST /api/find-my/devices, "
                            + "docs/clients.md); to stop the phone, remove its broker login"),
                ])
        }
        acknowledge()
    }

    private func testHold(_ deviceID: UInt64) {
        Self.logTestHold(deviceID, configuration.testHold!)
    }

    private static func logTestHold(_ deviceID: UInt64, _ hold: TestHold) {
        StructuredLog.info(
            "mqtt_test_hold", ["point": .string(hold.rawValue), "device_id": .int(Int64(deviceID))])
    }

    /// The device's UUID, derived from its topic (Clients' `OwnTracksMQTT.deviceUUID`).
    static func deviceUUID(topic: String) -> UUID128 { OwnTracksMQTT.deviceUUID(topic: topic) }

    // MARK: status

    public func health() -> (degraded: Bool, members: [(String, JSONValue)]) {
        let status = client.withLock { $0 }?.status ?? MQTTClient.Status()
        let counted = counters.withLock { $0 }
        var members: [(String, JSONValue)] = [
            ("broker", .string("\(configuration.host):\(configuration.port)")),
            ("tls", .bool(configuration.tls)),
            ("topic", .string(configuration.topic.description)),
            ("connected", .bool(status.connected)),
            ("subscribed", .bool(status.subscribed)),
            ("connections", .integer(Int64(status.connections))),
            ("messages_received", .integer(Int64(status.messagesReceived))),
            ("oversized_messages", .integer(Int64(status.oversizedMessagesReceived))),
            ("acknowledgements_sent", .integer(Int64(status.acknowledgementsSent))),
            ("acknowledgements_pending", .integer(Int64(status.acknowledgementsPending))),
            ("devices_enrolled", .integer(Int64(counted.enrolled))),
            // Commands published to phones (<topic>/cmd): acknowledged by the broker, and waiting.
            ("commands_acknowledged", .integer(Int64(status.publishesAcknowledged))),
            ("commands_pending", .integer(Int64(status.publishesPending))),
            ("unknown_user_messages", .integer(Int64(counted.dropped[.unknownUser] ?? 0))),
        ]
        if let error = status.lastError { members.append(("last_error", .string(error))) }
        return (!status.subscribed, members)
    }

    public func metricsText() -> String {
        let status = client.withLock { $0 }?.status ?? MQTTClient.Status()
        let counted = counters.withLock { $0 }
        var out =
            "# HELP findmy_mqtt_connected Whether the OwnTracks MQTT subscription is up (1) or not (0).\n"
        out += "# TYPE findmy_mqtt_connected gauge\n"
        out += "findmy_mqtt_connected \(status.subscribed ? 1 : 0)\n"
        out += "# HELP findmy_mqtt_connections_total Connections the broker accepted since the start.\n"
        out += "# TYPE findmy_mqtt_connections_total counter\n"
        out += "findmy_mqtt_connections_total \(status.connections)\n"
        out +=
            "# HELP findmy_mqtt_messages_received_total Messages the broker delivered (redeliveries included).\n"
        out += "# TYPE findmy_mqtt_messages_received_total counter\n"
        out += "findmy_mqtt_messages_received_total \(status.messagesReceived)\n"
        out +=
            "# HELP findmy_mqtt_messages_oversized_total Messages larger than findmy reads, acknowledged and discarded unread (redeliveries included).\n"
        out += "# TYPE findmy_mqtt_messages_oversized_total counter\n"
        out += "findmy_mqtt_messages_oversized_total \(status.oversizedMessagesReceived)\n"
        out += "# HELP findmy_mqtt_acknowledgements_sent_total QoS 1 messages acknowledged to the broker.\n"
        out += "# TYPE findmy_mqtt_acknowledgements_sent_total counter\n"
        out += "findmy_mqtt_acknowledgements_sent_total \(status.acknowledgementsSent)\n"
        out += "# HELP findmy_mqtt_acknowledgements_pending QoS 1 messages received and not yet durable.\n"
        out += "# TYPE findmy_mqtt_acknowledgements_pending gauge\n"
        out += "findmy_mqtt_acknowledgements_pending \(status.acknowledgementsPending)\n"
        out +=
            "# HELP findmy_mqtt_commands_acknowledged_total Commands published to phones that the broker acknowledged.\n"
        out += "# TYPE findmy_mqtt_commands_acknowledged_total counter\n"
        out += "findmy_mqtt_commands_acknowledged_total \(status.publishesAcknowledged)\n"
        out +=
            "# HELP findmy_mqtt_commands_pending Commands published to phones and not yet acknowledged by the broker.\n"
        out += "# TYPE findmy_mqtt_commands_pending gauge\n"
        out += "findmy_mqtt_commands_pending \(status.publishesPending)\n"
        out += "# HELP findmy_mqtt_devices_enrolled_total Devices enrolled by their first MQTT message.\n"
        out += "# TYPE findmy_mqtt_devices_enrolled_total counter\n"
        out += "findmy_mqtt_devices_enrolled_total \(counted.enrolled)\n"
        out +=
            "# HELP findmy_mqtt_messages_dropped_total Messages acknowledged without being stored, by reason.\n"
        out += "# TYPE findmy_mqtt_messages_dropped_total counter\n"
        for reason in Drop.allCases {
            out +=
                "findmy_mqtt_messages_dropped_total{reason=\"\(reason.rawValue)\"} \(counted.dropped[reason] ?? 0)\n"
        }
        return out
    }

    // MARK: files

    struct FileError: Error, CustomStringConvertible {
        var description: String
    }

    /// The first line of the file, without its line ending (a file written by `echo` works).
    static func readPassword(_ path: String) throws -> [UInt8] {
        let io = PosixFileIO()
        let fd: Int32
        do {
            fd = try io.open(path, flags: O_RDONLY | O_CLOEXEC, mode: 0)
        } catch {
            throw FileError(description: "--mqtt-password-file: cannot read '\(path)': \(error)")
        }
        defer { io.close(fd) }
        let bytes = try io.read(fd, count: min(try io.fileSize(fd, path: path), 65535), at: 0, path: path)
        return Array(bytes.prefix { $0 != 0x0A && $0 != 0x0D })
    }

    /// The client id kept in DATA_DIR/mqtt-client-id: "findmy-" and 16 random hex digits (23
    /// bytes, the length every MQTT 3.1.1 broker must accept), made and synced on the first start.
    /// The broker finds the session (the subscription and the messages not yet acknowledged) by
    /// this id, so it must not change between starts.
    static func clientID(dataDirectory: String) throws -> String {
        let io = PosixFileIO()
        let path = dataDirectory + "/mqtt-client-id"
        if let fd = try? io.open(path, flags: O_RDONLY | O_CLOEXEC, mode: 0) {
            defer { io.close(fd) }
            let bytes = try io.read(fd, count: min(try io.fileSize(fd, path: path), 64), at: 0, path: path)
            let id = String(decoding: bytes.prefix { $0 != 0x0A }, as: UTF8.self)
            if !id.isEmpty { return id }
        }
        let id = "findmy-" + Hex.encode(SecureRandom.bytes(count: 8))
        let temporary = path + ".tmp"
        let fd = try io.open(temporary, flags: O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode: 0o600)
        do {
            try io.writeAll(fd, Array((id + "\n").utf8), at: 0, path: temporary)
            try io.fsync(fd, path: temporary)
        } catch {
            io.close(fd)
            throw error
        }
        io.close(fd)
        try io.rename(temporary, path)
        try io.syncDirectory(dataDirectory)
        return id
    }
}

extension OwnTracksMQTTService {
    /// Every MQTT option of `findmy serve`.
    public static let settings: [(flag: String, environment: String, help: String)] = [
        (
            "mqtt-url", "FINDMY_MQTT_URL",
            "mqtt://HOST[:PORT] (port 1883 by default) or mqtts://HOST[:PORT] (TLS, port 8883 by default) of the broker OwnTracks phones publish to; findmy subscribes with a persistent session and acknowledges each QoS 1 message once it is durable"
        ),
        (
            "mqtt-ca-file", "FINDMY_MQTT_CA_FILE",
            "with mqtts://: PEM file of the CA certificates to trust for the broker's certificate instead of the system's CA store (a private CA); the URL's host must be a name or address the certificate lists"
        ),
        ("mqtt-username", "FINDMY_MQTT_USERNAME", "the broker login findmy subscribes as"),
        (
            "mqtt-password-file", "FINDMY_MQTT_PASSWORD_FILE",
            "a file whose first line is that login's password (never on the command line)"
        ),
        (
            "mqtt-topic", "FINDMY_MQTT_TOPIC",
            "the topic filter, with two + levels: the findmy user name, then the device name (default owntracks/+/+)"
        ),
        (
            "mqtt-client-id", "FINDMY_MQTT_CLIENT_ID",
            "the MQTT client id (default: one made on the first start and kept in DATA_DIR/mqtt-client-id; the broker keeps the session under it)"
        ),
    ]

    /// Starts the subscriber when `configuration` is given: after the log it appends to, stopped
    /// before it, so that every acknowledgement it waits for within the grace period can still come.
    /// Its command channel is what it returns, for the dispatcher.
    public static func start(
        _ configuration: Configuration?, ingest: IngestService, dataDirectory: String, group: ServiceGroup
    ) throws -> [any CommandChannel] {
        guard let configuration else { return [] }
        let subscriber = OwnTracksMQTTService(configuration, ingest: ingest, dataDirectory: dataDirectory)
        ingest.addStatusSource(subscriber)
        try group.start(subscriber)
        return [subscriber.commandChannel]
    }

    /// The MQTT configuration from the options, or nil without --mqtt-url.
    public static func configuration(_ value: (String, String) -> String?) throws -> Configuration? {
        guard let url = value("mqtt-url", "FINDMY_MQTT_URL"), !url.isEmpty else { return nil }
        let (host, port, tls) = try parseURL(url)
        let caFile = value("mqtt-ca-file", "FINDMY_MQTT_CA_FILE").flatMap { $0.isEmpty ? nil : $0 }
        if caFile != nil && !tls {
            throw UsageError("--mqtt-ca-file (FINDMY_MQTT_CA_FILE) is for a TLS broker: use an mqtts:// URL")
        }
        if let caFile, access(caFile, R_OK) != 0 {
            throw UsageError(
                "--mqtt-ca-file (FINDMY_MQTT_CA_FILE): cannot read '\(caFile)': \(String(cString: strerror(errno)))"
            )
        }
        let topicText = value("mqtt-topic", "FINDMY_MQTT_TOPIC") ?? "owntracks/+/+"
        guard let topic = TopicFilter(topicText, wildcards: 2) else {
            throw UsageError(
                "--mqtt-topic (FINDMY_MQTT_TOPIC) must be a topic filter with exactly two single-level wildcards, "
                    + "the user name then the device name, such as owntracks/+/+ (no '#'), got '\(topicText)'"
            )
        }
        var testHold: TestHold?
        if let hold = value("", "FINDMY_TEST_MQTT_HOLD"), !hold.isEmpty {
            guard let parsed = TestHold(rawValue: hold) else {
                throw UsageError(
                    "FINDMY_TEST_MQTT_HOLD is before-append or before-ack (tests only), got '\(hold)'")
            }
            testHold = parsed
        }
        let clientID = value("mqtt-client-id", "FINDMY_MQTT_CLIENT_ID")
        if let clientID, clientID.isEmpty || clientID.utf8.count > 65535 {
            throw UsageError("--mqtt-client-id (FINDMY_MQTT_CLIENT_ID) must be 1 to 65535 bytes")
        }
        return Configuration(
            host: host, port: port, tls: tls, caFile: caFile,
            username: value("mqtt-username", "FINDMY_MQTT_USERNAME"),
            passwordFile: value("mqtt-password-file", "FINDMY_MQTT_PASSWORD_FILE"), topic: topic,
            clientID: clientID, testHold: testHold)
    }

    /// `mqtt://host`, `mqtt://host:port`, `mqtt://[::1]:port`, and the same with `mqtts://` (TLS).
    static func parseURL(_ url: String) throws -> (host: String, port: UInt16, tls: Bool) {
        let usage =
            "--mqtt-url (FINDMY_MQTT_URL) must be mqtt://HOST[:PORT] or, for TLS, mqtts://HOST[:PORT] (login with --mqtt-username and --mqtt-password-file), got '\(url)'"
        let tls = url.hasPrefix("mqtts://")
        guard tls || url.hasPrefix("mqtt://") else { throw UsageError(usage) }
        var rest = Substring(url.dropFirst(tls ? "mqtts://".count : "mqtt://".count))
        if rest.hasSuffix("/") { rest = rest.dropLast() }
        guard !rest.isEmpty, !rest.contains("@"), !rest.contains("/"), !rest.contains("?") else {
            throw UsageError(usage)
        }
        var host: Substring
        var portText: Substring?
        if rest.hasPrefix("[") {
            guard let close = rest.firstIndex(of: "]") else { throw UsageError(usage) }
            host = rest[rest.index(after: rest.startIndex)..<close]
            let after = rest[rest.index(after: close)...]
            if !after.isEmpty {
                guard after.hasPrefix(":") else { throw UsageError(usage) }
                portText = after.dropFirst()
            }
        } else if let colon = rest.lastIndex(of: ":") {
            host = rest[..<colon]
            portText = rest[rest.index(after: colon)...]
        } else {
            host = rest
        }
        guard !host.isEmpty else { throw UsageError(usage) }
        var port: UInt16 = tls ? 8883 : 1883
        if let portText {
            guard let number = UInt16(portText), number > 0 else { throw UsageError(usage) }
            port = number
        }
        return (String(host), port, tls)
    }
}

/// TLS for `mqtts://`: TLS's stream (the module that owns libssl) is the bytes of the MQTT
/// connection.
extension TLSClientStream: ByteStream {}
