import Events
import Foundation
import HTTPClient
import JSON
import Testing

/// Names with control, invisible or text-direction characters (docs/api.md,
/// "Names"): refused with 400 where a name is given (enrolment, `findmy user add` offline and through
/// the admin socket, the admin page's form), and shown without those characters when an older log
/// holds them.
@Suite(.serialized) struct NameTests {
    let pages = PanelPageTests()

    @Test func spoofingNamesAreRefusedAndOldOnesShownWithoutTheirTricks() throws {
        let data = ScratchDirectory("findmy-names")
        let created = try FindmyProcess.run([
            "user", "add", "alice", "--admin", "--json", "--data-dir", data.path,
        ])
        let alice = try JSONParser.parse(created.output)["token"]!.stringValue
        try setPassword("alice", "a long passphrase", data: data.path)
        // Offline (no server running): straight into the log, through the same rule.
        let offline = try FindmyProcess.run(["user", "add", "ali\u{200B}ce", "--data-dir", data.path])
        #expect(offline.status != 0 && offline.error.contains("U+200B"), "\(offline.error)")
        // A name of white space, or padded with it, reads as no name or as another one.
        for padded in [" ", "alice ", " alice", "\u{3000}"] {
            let refused = try FindmyProcess.run(["user", "add", padded, "--data-dir", data.path])
            #expect(
                refused.status != 0 && refused.error.contains("white space"), "\(padded): \(refused.error)")
        }

        var phoneID: Int64 = 0
        do {
            let server = try ServerProcess(data: data.path, extraArguments: ["--projector", "on"])
            defer { server.stop() }
            let connection = HTTPConnection(address: server.address)

            // Enrolment: each field, each kind of character; the error names the field.
            for (name, model, field, character) in [
                ("\\u202eenohp", "iPhone", "name", "U+202E"), ("phone\\u2066", "iPhone", "name", "U+2066"),
                ("ph\\u200bone", "iPhone", "name", "U+200B"), ("phone\\u200f", "iPhone", "name", "U+200F"),
                ("phone\\u0085", "iPhone", "name", "U+0085"), ("phone\\ufeff", "iPhone", "name", "U+FEFF"),
                ("phone", "iPh\\u2060one", "model", "U+2060"), ("phone", "\\u061ciPhone", "model", "U+061C"),
            ] {
                let answer = try post(
                    connection, "/api/find-my/devices", token: alice,
                    body:
                        "{\"device_uuid\": \"\(UUID().uuidString)\", \"name\": \"\(name)\", \"platform\": \"ios\", \"model\": \"\(model)\"}"
                )
                #expect(answer.status == 400 && answer.errorCode == "invalid_field", "\(name) \(model)")
                let message = (try? answer.body["error"]?["message"]?.stringValue) ?? ""
                #expect(message.hasPrefix("\(field) contains \(character)"), "\(message)")
            }
            for name in [" ", "phone ", "\\u00a0phone"] {
                let answer = try post(
                    connection, "/api/find-my/devices", token: alice,
                    body:
                        "{\"device_uuid\": \"\(UUID().uuidString)\", \"name\": \"\(name)\", \"platform\": \"ios\", \"model\": \"x\"}"
                )
                #expect(answer.status == 400 && answer.errorCode == "invalid_field", "\(name)")
                let message = (try? answer.body["error"]?["message"]?.stringValue) ?? ""
                #expect(message.contains("white space"), "\(name): \(message)")
            }
            let phone = try enrol(connection, userToken: alice, uuid: "0c4e28ba-2fa1-11d2-883f-0016d3cca427")
            #expect(phone.status == 201 || phone.status == 200, "\(phone.body)")
            phoneID = try #require(phone.int("device_id"))
            #expect(
                try get(
                    connection, "/api/find-my/devices?after_offset=\(phone.int("offset") ?? 0)", token: alice
                )
                .status == 200)

            // Through the admin socket (a server is running).
            let viaSocket = try FindmyProcess.run([
                "user", "add", "mallory\u{202E}nimda", "--data-dir", data.path,
            ])
            #expect(viaSocket.status != 0 && viaSocket.error.contains("U+202E"), "\(viaSocket.error)")

            // The admin page's form.
            let session = try PanelFormTests().logIn(connection, "alice", "a long passphrase")
            let admin = try pages.request(connection, "GET", "/find-my/admin", cookies: [session])
            let csrf = try pages.hiddenField("csrf", in: admin.body)
            let form = try pages.request(
                connection, "POST", "/find-my/admin/users", cookies: [session],
                form: "name=mallory%E2%80%AEnimda&role=member&csrf=\(csrf)")
            #expect(form.status == 303 && form.header("Location") == "/find-my/admin?error=invalid_name")
            let users = try get(connection, "/api/find-my/admin/users", token: alice)
            #expect((try? users.body["users"]?.arrayValue.count) == 1, "no user was created: \(users.body)")
        }

        // A log written before the rule: a user and a device name holding such characters.
        let log = try LogWriter(directory: data.path + "/log")
        try log.append(
            .userCreated(
                UserCreated(
                    userID: 2, name: "car\u{202E}ol\u{200B}", role: .member,
                    tokenHash: [UInt8](repeating: 7, count: 32))))
        try log.append(
            .deviceEnrolled(
                DeviceEnrolled(
                    deviceID: UInt64(phoneID), userID: 1,
                    deviceUUID: UUID128("0c4e28ba-2fa1-11d2-883f-0016d3cca427")!,
                    name: "pho\u{2066}ne\u{200F}", platform: "ios", model: "iPh\u{0085}one")))
        log.close()

        let server = try ServerProcess(data: data.path, extraArguments: ["--projector", "on"])
        defer { server.stop() }
        let connection = HTTPConnection(address: server.address)
        try waitForProjector(data.path)
        let tricks = ["\u{202E}", "\u{200B}", "\u{2066}", "\u{200F}", "\u{0085}"]
        for target in [
            "/find-my?selected=\(phoneID)", "/find-my/admin", "/find-my/devices/\(phoneID)/settings",
        ] {
            var page = try pages.request(connection, "GET", target, token: alice)
            #expect(page.status == 200, "\(target)")
            // A hidden form field carries a user's name as stored, so that a role change names the
            // very user; it is never shown.
            page.body = page.body.replacingOccurrences(
                of: "<input type=\"hidden\" name=\"user\" value=\"[^\"]*\">", with: "",
                options: .regularExpression)
            for trick in tricks {
                let shown = page.body.components(separatedBy: trick).dropFirst().map { String($0.prefix(40)) }
                #expect(
                    shown.isEmpty,
                    "\(target) shows U+\(String(trick.unicodeScalars.first!.value, radix: 16)) before \(shown)"
                )
            }
            #expect(
                page.body.contains(">phone<") || page.body.contains("<title>Settings of phone"), "\(target)")
        }
        let adminPage = try pages.request(connection, "GET", "/find-my/admin", token: alice)
        #expect(adminPage.body.contains("carol") && adminPage.body.contains("ios (iPhone)"))
        let panel = try pages.request(connection, "GET", "/find-my?selected=\(phoneID)", token: alice)
        #expect(panel.body.contains("ios (iPhone)"))
    }
}
