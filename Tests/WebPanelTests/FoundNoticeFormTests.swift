import Core
import Events
import Foundation
import HTTP
import Postgres
import Testing

@testable import Identity
@testable import Ingest
@testable import WebPanel

/// The panel's side of "notify when found" (docs/found-notices.md): the account page's alert
/// targets and the card's form, as a browser posts them, with what the registry holds after each.
@Suite struct FoundNoticeFormTests {
    @Test func theAccountPageSetsTheTargetsAndTheCardsFormArmsTheNotice() throws {
        let directory = NSTemporaryDirectory() + "findmy-panelfound-\(UInt64.random(in: 0...UInt64.max))"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        var options = LogOptions()
        options.diagnostics = { _ in }
        let ingest = try IngestService(log: try LogWriter(directory: directory + "/log", options: options))
        let identity = ingest.identity
        defer { identity.store.writer.close() }
        let olga = try identity.createUser(name: "olga", role: .member)
        let pete = try identity.createUser(name: "pete", role: .member)
        for (id, owner) in [(UInt64(7), olga.userID), (8, pete.userID)] {
            _ = try identity.appendAndApply(
                .deviceEnrolled(
                    DeviceEnrolled(
                        deviceID: id, userID: owner, deviceUUID: UUID128.random(), name: "phone",
                        platform: "ios", model: "")), receivedAtMicros: wallClockMicros())
        }
        let session = identity.sessions.create(userID: olga.userID, nowMicros: wallClockMicros())
        let csrf = identity.sessions.csrfToken(token: session, nowMicros: wallClockMicros()) ?? ""
        let pool = PostgresPool(conninfo: "host=\(directory)/no-postgres-here port=1")
        defer { pool.close() }
        let panel = PanelService(ingest: ingest, pool: pool)
        var builder = GuardedRouter(service: ingest, listener: .api)
        panel.addRoutes(to: &builder)
        let router = try builder.build()
        func call(_ method: String, _ path: String, _ form: String = "") -> HTTPResponse {
            var headers = HTTPHeaders()
            headers.add("Host", "findmy.test:8080")
            headers.add("Origin", "http://findmy.test:8080")
            headers.add("Cookie", "\(IdentityService.sessionCookieName)=\(session)")
            if !form.isEmpty { headers.add("Content-Type", "application/x-www-form-urlencoded") }
            return router.respond(
                to: HTTPRequest(
                    method: method, target: path, headers: headers, body: Array(form.utf8),
                    remoteAddress: "192.0.2.10:40000")
            ).response
        }
        let arm = "/find-my/devices/7/notify-when-found"

        // No target yet: to the account page, which says to set one.
        let early = call("POST", arm, "csrf=\(csrf)&armed=true")
        #expect(early.status == 303 && early.headers["Location"] == "/find-my/account?error=no_alert_target")
        let advice = String(
            decoding: call("GET", "/find-my/account?error=no_alert_target").body, as: UTF8.self)
        #expect(advice.contains("needs somewhere to notify you"))
        #expect(identity.foundNotice(deviceID: 7) == nil)

        // A loopback webhook is refused (no --allow-private-targets here); a public topic is kept.
        let refused = call(
            "POST", "/find-my/account/settings",
            "csrf=\(csrf)&notify_ntfy_url=&notify_webhook_url=http%3A%2F%2F127.0.0.1%2Fx")
        #expect(refused.headers["Location"] == "/find-my/account?error=invalid_target")
        let saved = call(
            "POST", "/find-my/account/settings",
            "csrf=\(csrf)&notify_ntfy_url=https%3A%2F%2Fntfy.sh%2Folga-found&notify_webhook_url=")
        #expect(saved.headers["Location"] == "/find-my/account?done=targets")
        #expect(identity.notifyTargets(userID: olga.userID) == ("https://ntfy.sh/olga-found", ""))
        let page = String(decoding: call("GET", "/find-my/account").body, as: UTF8.self)
        #expect(page.contains("Alert targets") && page.contains("value=\"https://ntfy.sh/olga-found\""))

        // Armed from the card, back to the device on the map; then off again.
        let armed = call("POST", arm, "csrf=\(csrf)&armed=true")
        #expect(armed.status == 303 && armed.headers["Location"] == "/find-my?selected=7")
        #expect(identity.foundNotice(deviceID: 7)?.userID == olga.userID)
        _ = call("POST", arm, "csrf=\(csrf)&armed=false")
        // From a phone with the sheet pulled up: back with it up (a bad value is the default).
        let full = call("POST", arm, "csrf=\(csrf)&armed=true&sheet=full")
        #expect(full.headers["Location"] == "/find-my?selected=7&sheet=full")
        let odd = call("POST", arm, "csrf=\(csrf)&armed=false&sheet=sideways")
        #expect(odd.headers["Location"] == "/find-my?selected=7")
        #expect(identity.foundNotice(deviceID: 7) == nil)

        // Without the form's token, or on someone else's device: nothing happens.
        #expect(call("POST", arm, "armed=true").status == 403)
        #expect(call("POST", "/find-my/devices/8/notify-when-found", "csrf=\(csrf)&armed=true").status == 404)
        #expect(identity.foundNotice(deviceID: 7) == nil && identity.foundNotice(deviceID: 8) == nil)
    }
}
