import Crypto
import FindMyClient
import Foundation
import JSON
import Testing

@testable import WebPanel

/// What "Add a device" tells a person to type, per app (docs/panel.md), from the values it is given.
@Suite struct AppSetupTests {
    let base = "https://findmy.example.org"
    let token = "tok_ABC-123_xyz"

    func setup(_ app: SetupApp, broker: MQTTBroker? = nil, device: String = "Kim's phone") -> AppSetup {
        AppSetup(app: app, baseURL: base, userName: "kim", deviceName: device, token: token, broker: broker)
    }

    func value(_ setup: AppSetup, _ label: String) -> String? {
        setup.settings.first { $0.label == label }?.value
    }

    @Test func overlandGetsItsEndpointTokenAndSetupLink() {
        let overland = setup(.overland)
        #expect(value(overland, "Receiver Endpoint") == base + "/api/find-my/overland")
        #expect(value(overland, "Access Token") == token)
        #expect(
            overland.link
                == "overland://setup?url=https%3A%2F%2Ffindmy.example.org%2Fapi%2Ffind-my%2Foverland&token=tok_ABC-123_xyz&device_id=Kim%27s%20phone"
        )
    }

    @Test func findmysLinkCarriesTheEnrolmentAndTheClientReadsItBack() throws {
        let uuid = "1b4e28ba-2fa1-11d2-883f-0016d3cca427"
        let findmy = AppSetup(
            app: .findmy, baseURL: base, userName: "kim", deviceName: "Kim's laptop", token: token,
            broker: nil,
            device: (7, uuid))
        #expect(
            findmy.link
                == "findmy://setup?url=https%3A%2F%2Ffindmy.example.org&device_id=7&device_uuid=\(uuid)&token=tok_ABC-123_xyz"
        )
        #expect(value(findmy, "Device id") == "7")
        let parsed = try SetupLink.parse(try #require(findmy.link))
        #expect(parsed == SetupLink(serverURL: base, deviceID: 7, deviceUUID: uuid, deviceToken: token))
        // Without the enrolled device (an older caller), the settings alone.
        #expect(setup(.findmy).link == nil)
    }

    @Test func owntracksHTTPLinkIsItsConfigurationInPercentEncodedBase64() throws {
        let owntracks = setup(.owntracksHTTP)
        let prefix = "owntracks:///config?inline="
        let link = try #require(owntracks.link)
        #expect(link.hasPrefix(prefix))
        let encoded = String(link.dropFirst(prefix.count))
        // Android URL-decodes the value before base64 ('+' would become a space): none may stay raw.
        #expect(!encoded.contains("+") && !encoded.contains("/") && !encoded.contains("="))
        let base64 = try #require(encoded.removingPercentEncoding)
        let configuration = try JSONParser.parse(try #require(Base64.decode(base64)))
        #expect(try configuration["mode"]?.int64Value == 3)
        #expect(try configuration["password"]?.stringValue == token)
        #expect(try configuration["deviceId"]?.stringValue == "Kim's phone")
        #expect(try configuration["tid"]?.stringValue == "KI")
        #expect(owntracks.settings.filter(\.secret).map(\.value) == [token])
    }

    @Test func mqttNamesTheBrokerOrSaysToAskForIt() throws {
        let broker = try #require(MQTTBroker(url: "mqtts://findmy@broker.example.org:8884"))
        #expect(broker == MQTTBroker(host: "broker.example.org", port: 8884, tls: true))
        #expect(MQTTBroker(url: "mqtt://10.0.0.2") == MQTTBroker(host: "10.0.0.2", port: 1883, tls: false))
        #expect(MQTTBroker(url: "mqtt://[::1]") == MQTTBroker(host: "[::1]", port: 1883, tls: false))
        #expect(MQTTBroker(url: "mqtt://[::1]:1884")?.port == 1884)
        #expect(MQTTBroker(url: "http://broker") == nil && MQTTBroker(url: "mqtt://host:99999") == nil)
        let configured = setup(.owntracksMQTT, broker: broker, device: "phone")
        #expect(value(configured, "Host") == "broker.example.org" && value(configured, "Port") == "8884")
        #expect(value(configured, "TLS") == "on")
        #expect(value(configured, "Topic the app publishes to") == "owntracks/kim/phone")
        #expect(configured.link == nil)
        let unconfigured = setup(.owntracksMQTT, device: "phone")
        #expect(value(unconfigured, "Host, port and TLS")?.hasPrefix("ask your administrator") == true)
    }

    @Test func osmandFamilyCarriesTheTokenAsId() {
        let gpslogger = setup(.gpslogger)
        #expect(
            value(gpslogger, "URL")?.hasPrefix(base + "/api/find-my/osmand?id=tok_ABC-123_xyz&lat=%LAT")
                == true)
        let traccar = setup(.traccar)
        #expect(value(traccar, "Server URL (Traccar Client)") == base + "/api/find-my/osmand")
        #expect(value(traccar, "Device identifier (Traccar Client)") == token)
    }

    @Test func theDeviceListLinksToAddADevice() {
        for devices in [[], [PanelDevice(id: 1, name: "phone", platform: "ios", model: "", paused: false)]] {
            let page = PanelPage(
                userName: "kim", devices: devices, selection: .none, nowMicros: 1_796_220_000_000_000,
                configuration: PanelService.Configuration())
            var html = HTML()
            page.deviceList(&html)
            #expect(String(decoding: html.bytes, as: UTF8.self).contains("href=\"/find-my/devices/new\""))
        }
    }
}
