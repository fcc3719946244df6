import CNATS
import Events
import Threads

#if canImport(Glibc)
    import Glibc
#endif

/// What a JetStream log is, and how long to wait for it.
public struct JetStreamLogConfiguration: Sendable {
    /// `nats://host:port` URLs of the cluster's nodes (any of them; the client finds the others).
    public var servers: [String]
    public var streamName = "FINDMY_LOG"
    public var subjectPrefix = "findmy.log"
    /// Partitions of a new stream; an existing stream must have exactly this many.
    public var partitionCount: Int
    public var replicas = 3
    /// How long JetStream remembers a `Nats-Msg-Id`: a batch retried later than this is stored
    /// again (the fold still drops it by its batch id, docs/scale.md).
    public var duplicateWindowSeconds = 120
    /// Whether a missing stream is created; otherwise opening fails with `streamMissing`.
    public var createsStream = true
    /// An append retries (with the same Msg-Ids) until this has passed, then fails with `noQuorum`.
    public var appendDeadlineMillis: Int64 = 10_000
    /// Each publish attempt waits this long for its acknowledgement.
    public var publishAckWaitMillis: Int64 = 2_000
    /// Connecting, and creating or verifying the stream (while the cluster elects its leaders).
    /// Two minutes: a node started with its NATS cluster waits for it to form ("no suitable peers
    /// for placement" until every node has joined), which took more than 30 s on a loaded machine.
    public var openDeadlineMillis: Int64 = 120_000
    /// A read waits this long for the next message it knows is there.
    public var readWaitMillis: Int64 = 10_000

    public init(servers: [String], partitionCount: Int) {
        self.servers = servers
        self.partitionCount = partitionCount
    }

    public func subject(partition: Int) -> String { "\(subjectPrefix).\(partition)" }
}

/// Why the JetStream log refused or failed; each says what to do.
public enum JetStreamLogError: Error, CustomStringConvertible, Equatable {
    case connectFailed(String)
    case streamMissing(stream: String)
    case wrongPartitionCount(stream: String, found: Int, expected: Int)
    case wrongConfiguration(stream: String, String)
    case noQuorum(subject: String, waitedMillis: Int64, lastError: String)
    case refused(subject: String, String)
    case damagedMessage(subject: String, sequence: UInt64, String)
    case readFailed(subject: String, String)
    case requestFailed(String)

    public var description: String {
        switch self {
        case .connectFailed(let why):
            "cannot connect to the NATS cluster: \(why); check the nats:// URLs and that the nodes run"
        case .streamMissing(let stream):
            "the JetStream stream \(stream) does not exist; create it (open the log with stream creation on)"
        case .wrongPartitionCount(let stream, let found, let expected):
            "the JetStream stream \(stream) has \(found) partitions, this findmy is configured for \(expected); "
                + "partitions are fixed when the stream is created: configure \(found)"
        case .wrongConfiguration(let stream, let why):
            "the JetStream stream \(stream) is not configured as a findmy log: \(why)"
        case .noQuorum(let subject, let waited, let last):
            "no acknowledgement from JetStream for \(subject) within \(waited) ms (\(last)): the stream has no "
                + "leader with a quorum of its replicas; at least 2 of 3 NATS nodes must be up and connected. "
                + "Nothing was acknowledged; retrying the same batch is safe"
        case .refused(let subject, let why):
            "JetStream refused the append to \(subject): \(why)"
        case .damagedMessage(let subject, let sequence, let why):
            "the message at sequence \(sequence) of \(subject) is not one findmy record: \(why)"
        case .readFailed(let subject, let why):
            "reading \(subject) failed: \(why)"
        case .requestFailed(let why):
            "a JetStream request failed: \(why)"
        }
    }
}

/// A C string owned for the life of the log (the C client keeps pointers to some of them).
final class CString: @unchecked Sendable {
    let pointer: UnsafeMutablePointer<CChar>
    let text: String

    init(_ text: String) {
        self.text = text
        pointer = strdup(text)!
    }

    var constant: UnsafePointer<CChar> { UnsafePointer(pointer) }

    deinit { free(pointer) }
}
