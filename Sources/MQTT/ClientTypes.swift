// The values a client is configured with and hands out: its settings, the tickets and deliveries
// of received messages, the outcomes of publishes, the lines of its life, and its status.

extension MQTTClient {
    public struct Configuration: Sendable {
        public var host: String
        public var port: UInt16
        /// The same on every start, so that the broker finds the session it kept.
        public var clientID: String
        public var username: String?
        public var password: [UInt8]?
        /// Subscribed together, each at QoS 1.
        public var topicFilters: [String]
        public var keepAliveSeconds: UInt16 = 60
        public var connectTimeoutMillis = 10_000
        public var reconnectDelayMillisMin = 250
        public var reconnectDelayMillisMax = 30_000
        public var packetBytesMax = 1 << 20
        /// Messages `publish` holds until the broker acknowledges them; more are refused.
        public var outboundPublishesMax = 1024
        /// nil: the socket as it is (`mqtt://`); else the stream over it, TLS for `mqtts://`.
        public var streamOpener: ByteStreamOpener?

        public init(
            host: String, port: UInt16, clientID: String, username: String? = nil, password: [UInt8]? = nil,
            topicFilters: [String]
        ) {
            self.host = host
            self.port = port
            self.clientID = clientID
            self.username = username
            self.password = password
            precondition(!topicFilters.isEmpty, "subscribe to at least one topic filter")
            self.topicFilters = topicFilters
        }
    }

    /// What a message's acknowledgement needs: its connection and its place on it.
    public struct Ticket: Sendable, Equatable {
        let connection: UInt64
        let sequence: UInt64
    }

    /// A delivered message. For QoS 1, pass `ticket` to `acknowledge` exactly once, when the
    /// message is safe (findmy: durable in the log); QoS 0 messages have no ticket. An oversized
    /// message (`publish.oversizedPayloadBytes`) comes the same way, without its payload, and must
    /// be acknowledged too, or the broker sends it again on every connection.
    public struct Delivery: Sendable {
        public var publish: Publish
        public var ticket: Ticket?
    }

    /// What became of a message handed to `publish`.
    public enum PublishOutcome: Sendable, Equatable {
        /// The broker acknowledged it (PUBACK): it has it, and delivers it to the subscribers.
        case acknowledged
        /// Never acknowledged: the queue was full, or the client stopped first.
        case failed(String)
    }

    /// Lines of the client's life, for the owner's log.
    public enum Event: Sendable, Equatable {
        case connected(sessionPresent: Bool)
        case connectionFailed(String)
        case disconnected(String)
    }

    public struct Status: Sendable, Equatable {
        public var connected = false
        /// The broker granted the subscription on the current connection.
        public var subscribed = false
        public var connections = 0
        public var messagesReceived = 0
        /// Of those, messages larger than `packetBytesMax`, delivered without their payload
        /// (`Publish.oversizedPayloadBytes`).
        public var oversizedMessagesReceived = 0
        public var acknowledgementsSent = 0
        /// QoS 1 messages received on the current connection and not yet acknowledged.
        public var acknowledgementsPending = 0
        /// Messages published and not yet acknowledged by the broker.
        public var publishesPending = 0
        public var publishesAcknowledged = 0
        public var lastError: String?

        public init() {}
    }
}
