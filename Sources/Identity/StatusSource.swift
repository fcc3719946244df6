import JSON
import Synchronization
import Threads

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

/// A service with more to say in `/healthz` than its state: members added to its object in
/// `services` (the embedded PostgreSQL's restarts and how it last ended).
public protocol ServiceHealthDetails: Service {
    var healthMembers: [(String, JSONValue)] { get }
}

/// The services of `findmy serve` in `/healthz` (`services`: each one's `state`, its `error` once
/// failed or while restarting, and what a `ServiceHealthDetails` adds) and `/metrics`
/// (`findmy_service_running`). A service that is not running while the server answers makes the
/// status `degraded`.
public struct ServiceGroupStatus: StatusSource {
    let group: ServiceGroup
    public let name = "services"

    public init(_ group: ServiceGroup) { self.group = group }

    public func health() -> (degraded: Bool, members: [(String, JSONValue)]) {
        var degraded = false
        let members = group.services.map { service -> (String, JSONValue) in
            var fields: [JSONObject.Member] = []
            let state = service.state
            switch state {
            case .idle: fields = [.init(key: "state", value: .string("idle"))]
            case .running: fields = [.init(key: "state", value: .string("running"))]
            case .stopped: fields = [.init(key: "state", value: .string("stopped"))]
            case .failed(let why):
                fields = [
                    .init(key: "state", value: .string("failed")), .init(key: "error", value: .string(why)),
                ]
            case .restarting(let why):
                fields = [
                    .init(key: "state", value: .string("restarting")),
                    .init(key: "error", value: .string(why)),
                ]
            }
            if let details = service as? any ServiceHealthDetails {
                fields += details.healthMembers.map { JSONObject.Member(key: $0.0, value: $0.1) }
            }
            degraded = degraded || state != .running
            return (service.name, .object(JSONObject(fields)))
        }
        return (degraded, members)
    }

    public func metricsText() -> String {
        var text =
            "# HELP findmy_service_running Whether each service of the server runs (1) or not (0).\n"
            + "# TYPE findmy_service_running gauge\n"
        for service in group.states {
            text +=
                "findmy_service_running{service=\"\(service.name)\"} \(service.state == .running ? 1 : 0)\n"
        }
        return text
    }
}
