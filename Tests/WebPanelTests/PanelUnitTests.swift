import Testing

@testable import WebPanel

@Suite struct PanelUnitTests {
    @Test func everyValueIsEscaped() {
        var html = HTML()
        html.raw("<p title=\"")
        html.attribute("\"><script>alert(1)</script>'")
        html.raw("\">")
        html.text("<script>alert(1)</script> & co")
        html.raw("</p>")
        let text = String(decoding: html.bytes, as: UTF8.self)
        #expect(
            text
                == "<p title=\"&quot;&gt;&lt;script&gt;alert(1)&lt;/script&gt;&#39;\">&lt;script&gt;alert(1)&lt;/script&gt; &amp; co</p>"
        )
    }

    @Test func tileSourcesForTheContentSecurityPolicy() {
        #expect(
            cspSource(tileURL: "https://tile.openstreetmap.org/{z}/{x}/{y}.png")
                == "https://tile.openstreetmap.org")
        #expect(
            cspSource(tileURL: "https://{s}.tile.example.org/{z}/{x}/{y}.png") == "https://*.tile.example.org"
        )
        #expect(cspSource(tileURL: "http://127.0.0.1:9/{z}/{x}/{y}.png") == "http://127.0.0.1:9")
        #expect(cspSource(tileURL: "javascript:alert(1)") == "'none'")
        #expect(cspSource(tileURL: "https://evil.org; script-src *") == "'none'")
    }
}

#if canImport(Glibc)
    import Glibc
#endif

/// Values a log written before the fix ranges existed can hold are shown, never trapped on.
@Suite struct OutsizedValueTests {
    let page = PanelPage(
        userName: "alice", devices: [], selection: .none, nowMicros: 1_796_220_000_000_000,
        configuration: PanelService.Configuration())

    @Test func accuracyTextForEveryDouble() {
        #expect(page.meters(12) == "12 m")
        #expect(page.meters(999.4) == "999 m")
        #expect(page.meters(1_500) == "1.5 km")
        #expect(page.meters(1_000_000) == "1000.0 km")
        #expect(page.meters(.leastNonzeroMagnitude) == "0 m")
        for outsized in [1e21, 1e308, .greatestFiniteMagnitude, .infinity] {
            #expect(page.meters(outsized) == "more than 1000.0 km", "\(outsized)")
        }
        for unknown in [0, -0.0, -1, -1e308, -.infinity, .nan] {
            #expect(page.meters(unknown) == "unknown", "\(unknown)")
        }
    }

    @Test func timesOutsideRFC3339YearsAreClamped() {
        #expect(page.utcText(Int64.max) == "9999-12-31 23:59 UTC")
        #expect(page.utcText(Int64.min) == "0001-01-01 00:00 UTC")
        #expect(page.stamp(1_796_220_000_000_000) == "2026-12-02T14:00:00.000Z")
        #expect(
            page.relative(Int64.min).hasSuffix("ago") && page.relative(Int64.max).hasPrefix("in the future"))
    }
}

/// The device page's "Download" links: the range shown, in each format, at the export route.
@Suite struct DownloadLinkTests {
    @Test func theLinksNameTheRangeShownInEachFormat() {
        let page = PanelPage(
            userName: "alice", devices: [], selection: .none, nowMicros: 1_796_220_000_000_000,
            configuration: PanelService.Configuration())
        let device = PanelDevice(
            id: 42, name: "phone", platform: "ios", model: "", paused: false, sharedBy: nil,
            lastSeenAtMicros: nil, latest: nil)
        let history = PanelService.History(
            fromMicros: 1_709_251_200_000_000, toMicros: 1_709_337_600_000_000, fixCount: 3, truncated: false,
            shown: [], invalid: false)
        var html = HTML()
        page.downloadLinks(&html, device, history)
        let text = String(decoding: html.bytes, as: UTF8.self)
        for format in ["gpx", "geojson", "csv"] {
            #expect(
                text.contains(
                    "href=\"/api/find-my/devices/42/export?format=\(format)&amp;from=2024-03-01T00:00:00.000000Z"
                        + "&amp;to=2024-03-02T00:00:00.000000Z\""), "\(text)")
        }
        #expect(text.contains(">GPX</a>") && text.contains(">GeoJSON</a>") && text.contains(">CSV</a>"))
    }
}
