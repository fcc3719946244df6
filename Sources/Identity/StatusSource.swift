import JSON
import Synchronization

/// Another component of the server (the projector, say) that reports through `/healthz` and
/// `/metrics`. The service does not know what it is; it only asks.
public protocol StatusSource: Sendable {
    /// Its name as a member of the `/healthz` object.
    var name: String { get }
    /// Members of its `/healthz` object, and whether it is degraded (answers stay 200: the report
    /// path works without it, but a monitor should see the difference).
    func health() -> (degraded: Bool, members: [(String, JSONValue)])
    /// Prometheus text lines, `# HELP` and `# TYPE` included.
    func metricsText() -> String
}

/// The status sources registered with a service.
package final class StatusSources: Sendable {
    private let sources = Mutex<[any StatusSource]>([])

    package init() {}

    package func add(_ source: any StatusSource) { sources.withLock { $0.append(source) } }
    package var all: [any StatusSource] { sources.withLock { $0 } }
}
