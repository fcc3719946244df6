import Core
import Identity
import Testing

@testable import WebPanel

/// The page's geofence and presence parts as the server renders them: presence in the device list rows, the
/// geofence section (the script fills the list and draws), and the device's transitions section.
/// The script's side is the browser test's (Tests/Browser/panel_test.py).
@Suite struct GeofencePresencePanelTests {
    static let nowMicros: Int64 = 1_796_220_000_000_000
    static let hourMicros: Int64 = 3_600_000_000

    func device(_ id: UInt64, _ name: String) -> PanelDevice {
        PanelDevice(id: id, name: name, platform: "ios", model: "", paused: false, sharedBy: nil, latest: nil)
    }

    func page(selected: UInt64? = nil, presence: [UInt64: PresenceView] = [:]) -> PanelPage {
        let devices = [device(7, "Anna's laptop"), device(9, "Anna's <phone>")]
        var selection = PanelService.Selection.none
        if let selected, let chosen = devices.first(where: { $0.id == selected }) {
            selection = .device(chosen, cadenceMicros: nil, history: nil)
        }
        var page = PanelPage(
            userName: "alice", csrf: "token", devices: devices, selection: selection,
            nowMicros: Self.nowMicros, configuration: PanelService.Configuration())
        page.presence = presence
        return page
    }

    func text(_ page: PanelPage) -> String { String(decoding: page.render().bytes, as: UTF8.self) }

    /// The `<li>` of one device in the list.
    func row(_ html: String, _ id: UInt64) -> Substring {
        guard let start = html.range(of: "<li data-device-id=\"\(id)\"") else { return "" }
        let rest = html[start.lowerBound...]
        return rest[..<(rest.range(of: "</li>")?.upperBound ?? rest.endIndex)]
    }

    @Test func presenceIsInTheDeviceListRows() {
        let online = text(
            page(presence: [7: PresenceView(online: true, atMicros: Self.nowMicros, nodeName: "l")]))
        #expect(row(online, 7).contains("online on the tailnet"), "\(row(online, 7))")
        #expect(!row(online, 9).contains("tailnet"), "a device without a link says nothing of it")

        let seen = Self.nowMicros - 2 * Self.hourMicros
        let offline = text(page(presence: [7: PresenceView(online: false, atMicros: seen, nodeName: "l")]))
        #expect(row(offline, 7).contains("offline, last seen <span class=\"ago\""), "\(row(offline, 7))")
        #expect(row(offline, 7).contains(">2 h ago</span>"), "\(row(offline, 7))")

        let never = text(page(presence: [7: PresenceView(online: false, atMicros: nil, nodeName: "l")]))
        #expect(row(never, 7).contains("offline, not seen by the tailnet since it was linked"))
    }

    @Test func theDetailSaysTheSameAsTheRow() {
        let seen = Self.nowMicros - 2 * Self.hourMicros
        let html = text(
            page(selected: 7, presence: [7: PresenceView(online: false, atMicros: seen, nodeName: "laptop")]))
        #expect(
            html.contains(
                "<dd id=\"presence\"><span class=\"presence\">offline, last seen <span class=\"ago\""))
        #expect(html.contains("reachable, not where it is"))
    }

    @Test func theGeofenceSectionOffersEveryVisibleDeviceAndTheLimits() {
        let html = text(page())
        #expect(html.contains("<section id=\"geofences\""))
        #expect(html.contains("<button type=\"button\" id=\"new-geofence\""))
        #expect(html.contains("<form id=\"geofence-form\" hidden novalidate>"))
        // One checkbox per device the reader can see, the name escaped.
        #expect(html.contains("name=\"device\" value=\"7\""))
        #expect(html.contains("name=\"device\" value=\"9\""))
        #expect(html.contains("Anna&#39;s &lt;phone&gt;"))
        #expect(html.contains("min=\"10\" max=\"100000\""), "the radius input states the API's range")
        #expect(html.contains("\"geofence_radius_m\":{\"min\":10,\"max\":100000}"), "and the island too")
    }

    @Test func aSelectedDeviceHasATransitionsSection() {
        #expect(!text(page()).contains("id=\"transitions\""))
        let html = text(page(selected: 9))
        #expect(
            html.contains(
                "<section id=\"transitions\" aria-labelledby=\"transitions-heading\" data-device=\"9\""))
        #expect(html.contains("<ol id=\"transition-list\""))
    }
}
