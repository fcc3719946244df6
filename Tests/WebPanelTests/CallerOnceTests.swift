import Core
import Events
import Foundation
import HTTP
import Postgres
import Testing

@testable import Identity
@testable import Ingest
@testable import WebPanel

/// The panel's pages take the caller, and its session's CSRF token, from the gate: one
/// lookup of the session cookie per request, where a page used to look it up again for the user,
/// again for the CSRF token it prints and again for the one a form sent. The database is one that
/// cannot be reached; the pages that read it answer their 503 page, after the one lookup.
@Suite struct PanelCallerOnceTests {
    @Test func everyPageLooksTheSessionUpOnce() throws {
        let directory = NSTemporaryDirectory() + "findmy-panelonce-\(UInt64.random(in: 0...UInt64.max))"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        var options = LogOptions()
        options.diagnostics = { _ in }
        let ingest = try IngestService(log: try LogWriter(directory: directory + "/log", options: options))
        let identity = ingest.identity
        defer { identity.store.writer.close() }
        let olga = try identity.createUser(name: "olga", role: .admin)
        _ = try identity.appendAndApply(
            .deviceEnrolled(
                DeviceEnrolled(
                    deviceID: 7, userID: olga.userID, deviceUUID: UUID128.random(), name: "phone",
                    platform: "ios", model: "")), receivedAtMicros: wallClockMicros())
        let session = identity.sessions.create(userID: olga.userID, nowMicros: wallClockMicros())
        let csrf = identity.sessions.csrfToken(token: session, nowMicros: wallClockMicros()) ?? ""
        let pool = PostgresPool(conninfo: "host=\(directory)/no-postgres-here port=1")
        defer { pool.close() }
        let panel = PanelService(ingest: ingest, pool: pool)
        var builder = GuardedRouter(service: ingest, listener: .api)
        panel.addRoutes(to: &builder)
        let router = try builder.build()

        let calls: [(method: String, path: String, form: String, status: Int)] = [
            ("GET", "/find-my", "", 503),
            ("GET", "/find-my/account", "", 200),
            ("POST", "/find-my/account/token", "csrf=\(csrf)", 200),
            ("GET", "/find-my/devices/7/settings", "", 200),
            ("POST", "/find-my/devices/7/retention", "csrf=\(csrf)&days=7", 303),
            ("GET", "/find-my/devices/9/settings", "", 404),
            ("GET", "/find-my/admin", "", 200),
            ("GET", "/find-my/devices/new", "", 200),
        ]
        for call in calls {
            var headers = HTTPHeaders()
            headers.add("Host", "findmy.test:8080")
            headers.add("Origin", "http://findmy.test:8080")
            headers.add("Cookie", "\(IdentityService.sessionCookieName)=\(session)")
            if !call.form.isEmpty { headers.add("Content-Type", "application/x-www-form-urlencoded") }
            let request = HTTPRequest(
                method: call.method, target: call.path, headers: headers, body: Array(call.form.utf8),
                remoteAddress: "192.0.2.10:40000")
            let before = identity.sessions.lookups.count
            let response = router.respond(to: request).response
            let lookups = identity.sessions.lookups.count - before
            #expect(response.status == call.status, "\(call.method) \(call.path)")
            #expect(lookups == 1, "\(call.method) \(call.path) looked the session up \(lookups) times")
        }
    }
}
