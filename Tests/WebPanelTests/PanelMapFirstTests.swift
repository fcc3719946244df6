import Testing
import Tracks

@testable import WebPanel

/// The device page as the server renders it for the map-first panel: the map before the sheet,
/// the sheet's state from the URL, battery marks, directions, the place for "notify when found",
/// a range as stays and moves with the raw fixes folded away, and what the island gives the pins.
/// The script's side is the browser test's (Tests/Browser/panel_test.py).
@Suite struct PanelMapFirstTests {
    static let nowMicros: Int64 = 1_796_220_000_000_000
    static let minuteMicros: Int64 = 60_000_000

    func fix(
        _ latitude: Double, _ longitude: Double, minutesAgo: Int64, battery: Int64? = nil,
        charging: Bool? = nil
    )
        -> PanelFix
    {
        let at = Self.nowMicros - minutesAgo * Self.minuteMicros
        return PanelFix(
            latitude: latitude, longitude: longitude, accuracyMeters: 15, batteryPercent: battery,
            isCharging: charging, source: "significant", recordedAtMicros: at, receivedAtMicros: at,
            clockSuspect: false)
    }

    func device(_ id: UInt64, _ name: String, _ latest: PanelFix?, platform: String = "ios") -> PanelDevice {
        PanelDevice(
            id: id, name: name, platform: platform, model: "", paused: false, sharedBy: nil,
            lastSeenAtMicros: latest?.receivedAtMicros, latest: latest)
    }

    func text(_ page: PanelPage) -> String { String(decoding: page.render().bytes, as: UTF8.self) }

    func page(selected: PanelDevice?, history: PanelService.History? = nil, others: [PanelDevice] = [])
        -> PanelPage
    {
        let devices = (selected.map { [$0] } ?? []) + others
        var page = PanelPage(
            userName: "alice", csrf: "token", devices: devices,
            selection: selected.map { .device($0, cadenceMicros: nil, history: history) } ?? .none,
            nowMicros: Self.nowMicros, configuration: PanelService.Configuration())
        page.commandable = Set(devices.map(\.id))
        return page
    }

    @Test func theMapComesBeforeTheSheetWhoseStateIsTheURLs() throws {
        var rendered = page(
            selected: nil, others: [device(3, "Anna's phone", fix(52.5, 13.4, minutesAgo: 2))])
        var html = text(rendered)
        let map = try #require(html.range(of: "<div id=\"map\""))
        let sheet = try #require(html.range(of: "<div class=\"side sheet\" id=\"sheet\" data-state=\"half\""))
        #expect(map.lowerBound < sheet.lowerBound, "the map first, the list after it without the script")
        #expect(html.contains("id=\"sheet-toggle\" aria-controls=\"sheet\" aria-expanded=\"false\" hidden"))
        #expect(html.contains("<script src=\"/static/leaflet/leaflet.markercluster.js\" defer></script>"))
        #expect(html.contains("<script src=\"/static/panel-map.js\" defer></script>"))
        rendered.sheet = .full
        html = text(rendered)
        #expect(html.contains("id=\"sheet\" data-state=\"full\""))
    }

    @Test func lowBatteryAndChargingAreMarkedInTheListAndTheCard() {
        let flat = device(4, "Anna's tag", fix(48.85, 2.35, minutesAgo: 30, battery: 5))
        let charging = device(5, "Anna's phone", fix(52.5, 13.4, minutesAgo: 3, battery: 71, charging: true))
        let html = text(page(selected: flat, others: [charging]))
        #expect(html.contains("<span class=\"battery battery-low\">battery 5 % (low)</span>"))
        #expect(html.contains("<span class=\"battery charging\">battery 71 %, charging</span>"))
        #expect(html.contains("<dd id=\"battery\"><span class=\"battery battery-low\">5 % (low)</span></dd>"))
        let boundary = text(
            page(selected: device(6, "x", fix(1, 1, minutesAgo: 1, battery: 15, charging: false))))
        #expect(
            boundary.contains("<dd id=\"battery\"><span class=\"battery\">15 %, not charging</span></dd>"))
    }

    @Test func theCardHasDirectionsAndNotifyWhenFound() {
        let html = text(page(selected: device(7, "Anna's phone", fix(52.52, -0.000001, minutesAgo: 3))))
        #expect(html.contains("<a id=\"directions-geo\" href=\"geo:52.52,-0.000001\">"))
        #expect(html.contains("href=\"https://www.openstreetmap.org/directions?to=52.52%2C-0.000001\""))
        #expect(
            html.contains(
                "<form id=\"notify-form\" method=\"post\" action=\"/find-my/devices/7/notify-when-found\">"))
        #expect(html.contains("name=\"csrf\" value=\"token\""))
        #expect(
            html.contains("<dd id=\"at-place\" class=\"at-place\" hidden></dd>"), "the script names a fence")
        let nowhere = text(page(selected: device(8, "new", nil)))
        #expect(!nowhere.contains("id=\"directions\""), "no position, no directions")
    }

    @Test func notifyWhenFoundSaysWhetherItIsArmedAndIsTheOwnersAlone() {
        let phone = device(7, "Anna's phone", fix(52.52, 13.4, minutesAgo: 3000))
        let off = text(page(selected: phone))
        #expect(off.contains("<input type=\"hidden\" name=\"armed\" value=\"true\">"))
        #expect(
            off.contains("<p id=\"notify-state\" role=\"status\" data-device=\"7\" data-armed=\"false\">"))
        #expect(off.contains("<button type=\"submit\" id=\"notify-when-found\">Notify when found</button>"))
        #expect(off.contains("<p id=\"notify-delivery\""), "the script's line for the delivery log")

        var armedPage = page(selected: phone)
        armedPage.foundNotice = .init(
            userID: 1, armedOffset: 40, armedAtMicros: Self.nowMicros - Self.minuteMicros)
        let armed = text(armedPage)
        #expect(armed.contains("<input type=\"hidden\" name=\"armed\" value=\"false\">"))
        #expect(
            armed.contains(
                "data-device=\"7\" data-armed=\"true\"><strong>Notify when found is on</strong> since "))
        #expect(
            armed.contains("datetime=\"2026-12-02T13:59:00.000Z\">2026-12-02 13:59 UTC</time>"),
            "since the arming: \(armed)")
        #expect(armed.contains(">Turn off notify when found</button>"))

        // A device shared with the reader, even with the permission to locate: no form (the notice
        // would go to the owner's targets, and the route answers 404).
        var shared = phone
        shared.sharedBy = "olga"
        let lent = text(page(selected: shared))
        #expect(lent.contains("id=\"locate-now\""), "commands stay")
        #expect(!lent.contains("notify-form") && !lent.contains("notify-when-found"))
    }

    @Test func degreesNeverUseAnExponent() {
        #expect(PanelPage.degrees(52.52) == "52.52")
        #expect(PanelPage.degrees(-0.000001) == "-0.000001")
        #expect(PanelPage.degrees(1e-9) == "0")
        #expect(PanelPage.degrees(-180) == "-180")
        #expect(PanelPage.degrees(13.4050004) == "13.405")
    }

    /// Two stays of 40 minutes 2 km apart and the move between them, listed in order, oldest first;
    /// the fixes themselves folded under the stays.
    @Test func aRangeReadsAsStaysAndMoves() throws {
        var fixes: [PanelFix] = []
        for index in 0..<9 {
            fixes.append(fix(52.5 + Double(index % 2) * 0.00005, 13.4, minutesAgo: 120 - 5 * Int64(index)))
        }
        for step in 1...3 {
            fixes.append(
                fix(
                    52.5 + 0.00375 * Double(step), 13.4 + 0.005 * Double(step),
                    minutesAgo: 80 - 3 * Int64(step)))
        }
        for index in 0..<9 { fixes.append(fix(52.515, 13.42, minutesAgo: 68 - 5 * Int64(index))) }
        let points = fixes.map {
            TrackPoint(
                latitude: $0.latitude, longitude: $0.longitude, accuracyMeters: $0.accuracyMeters,
                recordedAtMicros: $0.recordedAtMicros)
        }
        let history = PanelService.History(
            fromMicros: Self.nowMicros - 180 * Self.minuteMicros, toMicros: Self.nowMicros,
            fixCount: fixes.count,
            truncated: false, shown: fixes, invalid: false, segments: summarizeStays(points))
        let html = text(page(selected: device(9, "Anna's bag", fixes.last), history: history))
        let list = try #require(html.range(of: "<ol id=\"stays\""))
        let rows = html[list.lowerBound...].components(separatedBy: "<li ").dropFirst().map {
            String($0.prefix(while: { $0 != ">" }))
        }
        #expect(
            rows.prefix(3).map { $0.contains("class=\"stay\"") ? "stay" : "move" } == [
                "stay", "move", "stay",
            ])
        #expect(html.contains("(40 min) · within 15 m"))
        #expect(html.contains("<strong>Moved</strong>") && html.contains(" · 2.1 km"))
        let fixesList = try #require(
            html.range(of: "<details id=\"fixes\"><summary>Every fix drawn (21)</summary>"))
        #expect(list.lowerBound < fixesList.lowerBound, "the stays first, the raw fixes one click away")
        #expect(html.contains("<input type=\"range\" id=\"track-slider\""))
        #expect(html.contains("\"segments\":[{\"type\":\"stay\",\"latitude\":52.5"))
    }

    @Test func theIslandGivesThePinsWhatTheyShow() {
        let phone = device(10, "Anna's phone", fix(52.5, 13.4, minutesAgo: 3, battery: 4, charging: true))
        let laptop = device(11, "Anna's laptop", fix(52.6, 13.5, minutesAgo: 200), platform: "linux")
        var rendered = page(selected: phone, others: [laptop])
        rendered.lost = [11]
        let html = text(rendered)
        #expect(html.contains("\"platform\":\"linux\",\"lost\":true,\"paused\":false,\"last_heard\":"))
        #expect(html.contains("\"battery_pct\":4,\"is_charging\":true"))
        // With no cadence known, an hour of silence makes the position "last known".
        #expect(html.contains("\"stale_after_s\":3600"))
    }
}
