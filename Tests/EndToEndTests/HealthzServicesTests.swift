import HTTPClient
import JSON
import Testing

/// `/healthz` names every service `findmy serve` started and its state (docs/api.md, "GET /healthz").
@Suite struct HealthzServicesTests {
    @Test func healthzShowsEachStartedServiceRunning() throws {
        let data = ScratchDirectory("findmy-healthz")
        let server = try ServerProcess(data: data.path)
        defer { server.stop() }
        let health = try HTTPConnection(address: server.address).send("GET", "/healthz")
        #expect(health.status == 200)
        let body = try JSONParser.parse(health.body)
        var states: [String: String] = [:]
        for (name, value) in try body["services"]?.objectValue.members.map({ ($0.key, $0.value) }) ?? [] {
            states[name] = try value["state"]?.stringValue
        }
        // --projector off: no PostgreSQL and no projector; the heap trimmer, the log, the registry
        // snapshotter, the compactor (idle without a database, but its service runs), the command
        // worker, the command streams, the book of history imports, the ntfy channel (which needs
        // no key), the admin socket and the API.
        #expect(
            states == [
                "heap-trim": "running", "log": "running", "snapshots": "running", "compactor": "running",
                "commands": "running", "command-streams": "running", "imports": "running", "ntfy": "running",
                "admin": "running", "api": "running",
            ])
        #expect(try body["status"]?.stringValue == "ok")
        let metrics = try HTTPConnection(address: server.address).send("GET", "/metrics")
        #expect(metrics.bodyText.contains("findmy_service_running{service=\"api\"} 1"))
    }
}
