import Foundation
import HTTPClient
import JSON
import Testing

/// The panel's "Add a device" (docs/panel.md) against a real `findmy serve`: log in, add a device
/// for OwnTracks, read the settings and the QR code of the setup link, see the token once.
@Suite(.serialized) struct AddDevicePageTests {
    let pages = PanelPageTests()

    @Test func addingADeviceForOwnTracksShowsItsSettingsAndQRCodeOnce() throws {
        let data = ScratchDirectory("findmy-add-device")
        _ = try addUser("alice", data: data.path)
        try setPassword("alice", "a long passphrase", data: data.path)
        let server = try ServerProcess(
            data: data.path, extraArguments: ["--public-url", "https://findmy.example.org"])
        defer { server.stop() }
        let connection = HTTPConnection(address: server.address)
        let session = try PanelFormTests().logIn(connection, "alice", "a long passphrase")

        let form = try pages.request(connection, "GET", "/find-my/devices/new", cookies: [session])
        #expect(form.status == 200)
        #expect(form.body.contains("value=\"owntracks-http\"") && form.body.contains("value=\"overland\""))
        let csrf = try pages.hiddenField("csrf", in: form.body)
        let uuid = try pages.hiddenField("device_uuid", in: form.body)
        let fields = "name=alices-phone&app=owntracks-http&device_uuid=\(uuid)"

        // Without the session's token, or from another site's page: nothing is added.
        #expect(
            try pages.request(connection, "POST", "/find-my/devices/new", cookies: [session], form: fields)
                .status == 403)

        let added = try pages.request(
            connection, "POST", "/find-my/devices/new", cookies: [session], form: fields + "&csrf=\(csrf)")
        #expect(added.status == 201, "\(added.body)")
        #expect(added.header("Cache-Control") == "no-store")
        #expect(added.body.contains("<code>https://findmy.example.org/api/find-my/owntracks</code>"))
        #expect(added.body.contains("<dt>Mode</dt><dd><code>HTTP</code>"))
        #expect(added.body.contains("<dt>Username (UserID)</dt><dd><code>alice</code>"))
        #expect(added.body.contains("<dt>Device ID</dt><dd><code>alices-phone</code>"))
        #expect(added.body.contains("<svg class=\"qr\"") && added.body.contains("<path fill=\"#000\" d=\"M"))
        let token = try #require(
            added.body.components(separatedBy: "<dt>Password</dt><dd><code class=\"secret\">").dropFirst()
                .first?
                .components(separatedBy: "</code>").first)
        #expect(token.count >= 40)

        // The setup link is OwnTracks' inline configuration, carrying the same settings.
        let linkStart = try #require(added.body.range(of: "href=\"owntracks:///config?inline="))
        let encoded = String(added.body[linkStart.upperBound...].prefix { $0 != "\"" })
        let base64 = try #require(encoded.removingPercentEncoding)
        let configuration = try JSONParser.parse(Array(try #require(Data(base64Encoded: base64))))
        #expect(try configuration["_type"]?.stringValue == "configuration")
        #expect(try configuration["mode"]?.int64Value == 3)
        #expect(try configuration["url"]?.stringValue == "https://findmy.example.org/api/find-my/owntracks")
        #expect(try configuration["auth"]?.boolValue == true)
        #expect(try configuration["username"]?.stringValue == "alice")
        #expect(try configuration["password"]?.stringValue == token)
        #expect(try configuration["deviceId"]?.stringValue == "alices-phone")
        #expect(try configuration["tid"]?.stringValue == "AL")

        // The token is the device's: it reports through the native endpoint.
        let report = try post(
            connection, "/api/find-my/report", token: token,
            body: reportBody(batchID: UUID().uuidString, fixes: [fixJSON()]))
        #expect(report.status == 200 || report.status == 201, "\(report.body)")

        // A reload of the answer posts the same form again: the device is there, the token is not.
        let again = try pages.request(
            connection, "POST", "/find-my/devices/new", cookies: [session], form: fields + "&csrf=\(csrf)")
        #expect(again.status == 409)
        #expect(again.body.contains("added already") && !again.body.contains(token))
        #expect(
            !(try pages.request(connection, "GET", "/find-my/devices/new", cookies: [session]).body.contains(
                token)))

        // OwnTracks over MQTT: the topic names the device, so even a fresh form for the same name
        // finds the device of that topic (the one its first message would enrol).
        func addMQTT(_ name: String) throws -> PanelPageTests.Page {
            let form = try pages.request(connection, "GET", "/find-my/devices/new", cookies: [session])
            let uuid = try pages.hiddenField("device_uuid", in: form.body)
            return try pages.request(
                connection, "POST", "/find-my/devices/new", cookies: [session],
                form: "name=\(name)&app=owntracks-mqtt&device_uuid=\(uuid)&csrf=\(csrf)")
        }
        let mqtt = try addMQTT("tablet")
        #expect(mqtt.status == 201)
        #expect(mqtt.body.contains("<code>owntracks/alice/tablet</code>"))
        #expect(mqtt.body.contains("ask your administrator for the broker"))
        #expect(!mqtt.body.contains("<svg"))
        #expect(try addMQTT("tablet").status == 409)
        let slash = try addMQTT("a%2Fb")
        #expect(
            slash.status == 303 && slash.header("Location")?.hasSuffix("error=invalid_topic_name") == true)
    }
}
