import Foundation
import HTTPClient
import JSON
import Testing

/// Who sees whom, over real HTTP against `findmy serve --projector on`: every location route, for
/// a member and an admin, against their own device, a shared one, a shared-then-revoked one and
/// someone else's. Then password login, sessions and logout. The rules of the wall clock (a share's
/// `until`, a session's idle and age limits) are checked on a manual clock in process
/// (IngestTests' `ClockRulesTests`): waiting for the real clock here would make the outcome depend
/// on the machine's speed.
@Suite(.serialized) struct PermissionMatrixTests {
    func send(
        _ connection: HTTPConnection, _ method: String, _ target: String, token: String? = nil,
        cookie: String? = nil, body: String? = nil, contentType: String = "application/json"
    ) throws -> (answer: Answer, headers: [(name: String, value: String)]) {
        var headers: [(name: String, value: String)] = []
        if let token { headers.append(("Authorization", "Bearer \(token)")) }
        if let cookie { headers.append(("Cookie", "findmy_session=\(cookie)")) }
        if body != nil { headers.append(("Content-Type", contentType)) }
        let response = try connection.send(method, target, headers: headers, body: Array((body ?? "").utf8))
        return (
            Answer(status: response.status, body: (try? JSONParser.parse(response.body)) ?? .null),
            response.headers
        )
    }

    @Test func everyRoleAndRelationOnEveryLocationRoute() throws {
        let data = ScratchDirectory("findmy-perm")
        let olga = try addUser("olga", data: data.path)
        let mia = try addUser("mia", data: data.path)
        let server = try ServerProcess(data: data.path, extraArguments: ["--projector", "on"])
        defer { server.stop() }
        // The admin is created through the socket while the server runs, as a member, then promoted.
        let adam = try addUser("adam", data: data.path)
        let promoted = try FindmyProcess.run(["user", "role", "adam", "admin", "--data-dir", data.path])
        #expect(promoted.status == 0, "\(promoted.error)")
        let connection = HTTPConnection(address: server.address)

        var ids: [String: Int64] = [:]
        var lastOffset: Int64 = 0
        for (owner, token, name) in [
            ("mia", mia, "mia-own"), ("adam", adam, "adam-own"), ("olga", olga, "shared"),
            ("olga", olga, "revoked"), ("olga", olga, "other"),
        ] {
            _ = owner
            let enrolled = try enrol(connection, userToken: token, uuid: UUID().uuidString, name: name)
            let id = try #require(enrolled.int("device_id"))
            ids[name] = id
            let report = try post(
                connection, "/api/find-my/report", token: enrolled.string("device_token"),
                body: reportBody(batchID: UUID().uuidString, fixes: [fixJSON()]))
            #expect(report.status == 200)
            lastOffset = max(lastOffset, report.int("offset") ?? 0)
        }
        // A share with an `until` far ahead works like one without (its expiry: ClockRulesTests).
        let untilFarAhead = RFC3339.formatMillis(
            Int64(Date().timeIntervalSince1970 * 1_000_000) + 86_400_000_000)
        for reader in ["mia", "adam"] {
            for (device, until) in [("shared", untilFarAhead), ("revoked", nil)] as [(String, String?)] {
                let body = "{\"user\": \"\(reader)\"" + (until.map { ", \"until\": \"\($0)\"" } ?? "") + "}"
                let granted = try send(
                    connection, "POST", "/api/find-my/devices/\(ids[device]!)/shares", token: olga, body: body
                )
                #expect(granted.answer.status == 201, "\(granted.answer.body)")
            }
            let revoked = try send(
                connection, "DELETE", "/api/find-my/devices/\(ids["revoked"]!)/shares/\(reader)", token: olga)
            #expect(revoked.answer.status == 200)
        }
        // Only the owner manages shares: a grantee gets the 404 of a missing device.
        let notOwner = try send(
            connection, "POST", "/api/find-my/devices/\(ids["shared"]!)/shares", token: mia,
            body: "{\"user\": \"adam\"}")
        #expect(notOwner.answer.status == 404 && notOwner.answer.errorCode == "device_not_found")

        // Every report is in the projection before the matrix is read.
        let projected = try get(
            connection, "/api/find-my/devices/\(ids["shared"]!)?after_offset=\(lastOffset)", token: mia)
        #expect(projected.status == 200 && projected.body["shared_by"] == .string("olga"))

        let missing = try get(connection, "/api/find-my/devices/999999", token: mia)
        #expect(missing.status == 404)
        let expected: [String: [String: Bool]] = [
            "mia": [
                "mia-own": true, "adam-own": false, "shared": true, "revoked": false, "other": false,
            ],
            "adam": [
                "mia-own": false, "adam-own": true, "shared": true, "revoked": false, "other": false,
            ],
        ]
        let tokens = ["mia": mia, "adam": adam]
        for (reader, relations) in expected {
            for (device, visible) in relations {
                for suffix in ["", "/locations", "/arrivals"] {
                    let answer = try get(
                        connection, "/api/find-my/devices/\(ids[device]!)\(suffix)", token: tokens[reader]!)
                    if visible {
                        #expect(answer.status == 200, "\(reader) \(device)\(suffix): \(answer.body)")
                        if suffix == "/locations" {
                            #expect((try? answer.body["locations"]?.arrayValue.count) == 1)
                        }
                    } else {
                        // Exactly the answer for a device that does not exist: status and body.
                        #expect(
                            answer.status == 404 && answer.body == missing.body,
                            "\(reader) \(device)\(suffix)")
                    }
                }
            }
            let list = try get(connection, "/api/find-my/devices", token: tokens[reader]!)
            let listed = try #require(try? list.body["devices"]?.arrayValue)
            let listedIDs = listed.compactMap { try? $0["id"]?.int64Value }
            let visibleIDs = relations.filter(\.value).map { ids[$0.key]! }.sorted()
            #expect(listedIDs == visibleIDs, "\(reader)")
            for device in listed {
                let shared = try device["id"]!.int64Value == ids["shared"]!
                #expect(device["shared_by"] == (shared ? .string("olga") : .null))
            }
        }

        // The admin exception: adam manages devices (names, owners, paused, last seen) but reads no
        // position of olga's unshared device, and the admin listing carries none.
        let adminDevices = try get(connection, "/api/find-my/admin/devices", token: adam)
        #expect(adminDevices.status == 200)
        let all = try #require(try? adminDevices.body["devices"]?.arrayValue)
        #expect(all.count == 5)
        for device in all {
            #expect(
                device.objectKeys.sorted() == [
                    "id", "last_seen_at", "model", "name", "owner", "paused", "platform",
                ])
        }
        #expect(
            try get(connection, "/api/find-my/devices/\(ids["other"]!)/locations", token: adam).status == 404)
        #expect(try get(connection, "/api/find-my/admin/devices", token: mia).status == 403)
        let users = try get(connection, "/api/find-my/admin/users", token: adam)
        #expect(users.status == 200 && (try? users.body["users"]?.arrayValue.count) == 3)
        #expect(try get(connection, "/api/find-my/admin/users", token: mia).status == 403)
    }

    @Test func passwordLoginSessionsLogoutAndAttemptLimit() throws {
        let data = ScratchDirectory("findmy-login")
        let nina = try addUser("nina", data: data.path)
        try setPassword("nina", "a long passphrase", data: data.path)
        let server = try ServerProcess(
            data: data.path,
            extraArguments: [
                // Limits far above the test's length: the session rules are checked on a manual clock
                // in ClockRulesTests; here only that the server takes the options.
                "--projector", "on", "--session-idle-seconds-max", "3600", "--session-age-seconds-max",
                "7200",
                "--login-attempts-per-minute-max", "4",
            ])
        defer { server.stop() }
        let connection = HTTPConnection(address: server.address)
        let enrolled = try enrol(connection, userToken: nina, uuid: UUID().uuidString)
        let deviceID = try #require(enrolled.int("device_id"))
        // The device is read back through the projection: wait for the enrolment to reach it.
        let enrolledAt = try #require(enrolled.int("offset"))

        func login(_ name: String, _ password: String) throws -> (Answer, String?, String?) {
            let (answer, headers) = try send(
                connection, "POST", "/login", body: "{\"name\": \"\(name)\", \"password\": \"\(password)\"}")
            let setCookie = headers.first { $0.name.lowercased() == "set-cookie" }?.value
            let value = setCookie?.split(separator: ";").first.map {
                String($0.dropFirst("findmy_session=".count))
            }
            return (answer, setCookie, value)
        }

        // Right password: a session cookie with the attributes that keep it out of scripts and
        // other sites, which then reads like the user token.
        let (ok, setCookie, session) = try login("nina", "a long passphrase")
        #expect(ok.status == 200 && ok.string("user") == "nina", "\(ok.body)")
        let attributes = try #require(setCookie)
        #expect(
            attributes.contains("HttpOnly") && attributes.contains("SameSite=Strict")
                && attributes.contains("Path=/"))
        #expect(!attributes.contains("Secure"), "plain HTTP without a TLS proxy")
        let cookie = try #require(session)
        #expect(cookie.count >= 43)
        #expect(
            try send(
                connection, "GET", "/api/find-my/devices/\(deviceID)?after_offset=\(enrolledAt)",
                cookie: cookie
            ).answer.status == 200)

        // Wrong password and unknown name: the same 401, the same body.
        let (wrong, wrongCookie, _) = try login("nina", "not it at all")
        let (unknown, _, _) = try login("nobody", "a long passphrase")
        #expect(wrong.status == 401 && wrong.errorCode == "invalid_credentials" && wrongCookie == nil)
        #expect(unknown.status == 401 && unknown.body == wrong.body)
        // A form without the login page's csrf field is refused (login CSRF), and so is text/plain.
        let form = try send(
            connection, "POST", "/login", body: "name=nina&password=a+long+passphrase",
            contentType: "application/x-www-form-urlencoded")
        #expect(form.answer.status == 403 && form.answer.errorCode == "csrf_field_missing")
        let plain = try send(
            connection, "POST", "/login", body: "{\"name\": \"nina\", \"password\": \"a long passphrase\"}",
            contentType: "text/plain")
        #expect(plain.answer.status == 415 && plain.answer.errorCode == "unsupported_media_type")
        let json = try send(
            connection, "POST", "/login", body: "{\"name\": \"nina\", \"password\": \"a long passphrase\"}")
        #expect(json.answer.status == 200)

        // A session cookie that is not one (never issued, or ended) is refused as a session.
        let unknownSession = try send(
            connection, "GET", "/api/find-my/devices", cookie: String(repeating: "x", count: 43))
        #expect(unknownSession.answer.status == 401 && unknownSession.answer.errorCode == "invalid_session")

        // The fourth attempt within a minute was allowed, the fifth is refused for that name only.
        let (fourth, _, second) = try login("nina", "a long passphrase")
        #expect(fourth.status == 200)
        let (fifth, _, _) = try login("nina", "a long passphrase")
        #expect(fifth.status == 429 && fifth.errorCode == "too_many_attempts")

        // Logout ends the session at once.
        let live = try #require(second)
        #expect(try send(connection, "GET", "/api/find-my/devices", cookie: live).answer.status == 200)
        // The cookie alone ends nothing (another site could send it); the session's CSRF token does.
        let refused = try send(connection, "POST", "/logout", cookie: live)
        #expect(refused.answer.status == 403 && refused.answer.errorCode == "csrf_token_missing")
        let csrf = try #require(fourth.string("csrf_token"))
        let response = try connection.send(
            "POST", "/logout", headers: [("Cookie", "findmy_session=\(live)"), ("X-CSRF-Token", csrf)],
            body: [])
        #expect(response.status == 200)
        #expect(try send(connection, "GET", "/api/find-my/devices", cookie: live).answer.status == 401)
        // A session never reaches a device route.
        #expect(
            try send(connection, "POST", "/api/find-my/reporting", cookie: live, body: "{\"paused\": true}")
                .answer.status == 401)
    }
}
