import Core
import Events
import Foundation
import HTTP
import Postgres
import Testing

@testable import Identity
@testable import Ingest
@testable import WebPanel

/// The ntfy topic on a device's settings page: the field with what goes there (and that locate
/// cannot), the Do Not Disturb advice; its form sets the topic in the registry as the API does,
/// refuses a URL that is not a topic's address, needs the session's CSRF token, and an empty field
/// removes the topic.
@Suite struct NtfyPanelTests {
    @Test func theSettingsPageSetsAndRemovesTheTopic() throws {
        let directory = NSTemporaryDirectory() + "findmy-ntfypanel-\(UInt64.random(in: 0...UInt64.max))"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        var options = LogOptions()
        options.diagnostics = { _ in }
        let ingest = try IngestService(log: try LogWriter(directory: directory + "/log", options: options))
        let identity = ingest.identity
        defer { identity.store.writer.close() }
        let olga = try identity.createUser(name: "olga", role: .member)
        let mia = try identity.createUser(name: "mia", role: .member)
        _ = try identity.appendAndApply(
            .deviceEnrolled(
                DeviceEnrolled(
                    deviceID: 7, userID: olga.userID, deviceUUID: UUID128.random(), name: "phone",
                    platform: "android", model: "")), receivedAtMicros: wallClockMicros())
        let pool = PostgresPool(conninfo: "host=\(directory)/no-postgres-here port=1")
        defer { pool.close() }
        let panel = PanelService(ingest: ingest, pool: pool)
        var builder = GuardedRouter(service: ingest, listener: .api)
        panel.addRoutes(to: &builder)
        let router = try builder.build()

        func call(_ user: UInt64, _ method: String, _ path: String, form: String? = nil, csrf: Bool = true)
            -> HTTPResponse
        {
            let session = identity.sessions.create(userID: user, nowMicros: wallClockMicros())
            let token = identity.sessions.csrfToken(token: session, nowMicros: wallClockMicros()) ?? ""
            var headers = HTTPHeaders()
            headers.add("Host", "findmy.test:8080")
            headers.add("Origin", "http://findmy.test:8080")
            headers.add("Cookie", "\(IdentityService.sessionCookieName)=\(session)")
            var body = ""
            if let form {
                headers.add("Content-Type", "application/x-www-form-urlencoded")
                body = (csrf ? "csrf=\(token)&" : "") + form
            }
            let request = HTTPRequest(
                method: method, target: path, headers: headers, body: Array(body.utf8),
                remoteAddress: "192.0.2.10:40000")
            return router.respond(to: request).response
        }
        func page(_ query: String = "") -> String {
            String(
                decoding: call(olga.userID, "GET", "/find-my/devices/7/settings" + query).body, as: UTF8.self)
        }

        let empty = page()
        #expect(empty.contains("<label for=\"ntfy-topic\">ntfy topic"), "\(empty)")
        #expect(empty.contains("“Locate now” cannot go through ntfy"))
        #expect(empty.contains("Keep alerting for highest priority"))
        #expect(empty.contains("No ntfy topic"))

        let topic = "https://ntfy.example/olga-phone-x7f3"
        let encoded = "https%3A%2F%2Fntfy.example%2Folga-phone-x7f3"
        let saved = call(olga.userID, "POST", "/find-my/devices/7/ntfy", form: "topic_url=\(encoded)")
        #expect(saved.status == 303 && saved.headers["Location"] == "/find-my/devices/7/settings?done=ntfy")
        #expect(identity.ntfyTopicURL(deviceID: 7) == topic)
        let shown = page("?done=ntfy")
        #expect(shown.contains("value=\"\(topic)\"") && shown.contains("The ntfy topic is saved"), "\(shown)")

        // Not a topic's address: refused, nothing changed.
        let refused = call(
            olga.userID, "POST", "/find-my/devices/7/ntfy", form: "topic_url=ftp%3A%2F%2Fx%2Ft")
        #expect(refused.headers["Location"] == "/find-my/devices/7/settings?error=invalid_ntfy_url")
        let withPassword = call(
            olga.userID, "POST", "/find-my/devices/7/ntfy",
            form: "topic_url=https%3A%2F%2Fu%3Ap%40ntfy.example%2Ft")
        #expect(withPassword.headers["Location"] == "/find-my/devices/7/settings?error=invalid_ntfy_url")
        // Without the session's CSRF token, or by someone else: refused.
        #expect(
            call(olga.userID, "POST", "/find-my/devices/7/ntfy", form: "topic_url=", csrf: false).status
                == 403)
        #expect(call(mia.userID, "POST", "/find-my/devices/7/ntfy", form: "topic_url=").status == 404)
        #expect(identity.ntfyTopicURL(deviceID: 7) == topic)

        let removed = call(olga.userID, "POST", "/find-my/devices/7/ntfy", form: "topic_url=")
        #expect(removed.headers["Location"] == "/find-my/devices/7/settings?done=ntfy_removed")
        #expect(identity.ntfyTopicURL(deviceID: 7) == nil)
    }
}
